"""/api/v1/rules/, /api/v1/webhooks/ and /api/v1/webhook-deliveries/: the project admins'
(every query starts from the projects the user administers, so anything else is a 404,
as on the pages)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import Count, F, Q, QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter

from automation import selectors, services
from automation.models import Rule, Webhook, WebhookDelivery
from automation.serializers import (
    RuleActiveSerializer,
    RuleCreateSerializer,
    RuleFiringSerializer,
    RuleSerializer,
    WebhookActiveSerializer,
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookDeliverySerializer,
    WebhookSerializer,
)
from labeling.models import Queue
from scoring.models import Scorer
from stepscope.pagination import ByIdCursor
from trajectories.models import Project
from trajectories.selection import SelectionError, TrajectoryFilters

_PROJECT = OpenApiParameter("project", str, description="A project's slug.")


def _in_project(queryset: QuerySet[Any], request: Request, field: str = "project") -> Any:
    slug = request.query_params.get("project")
    if slug:
        # A project the user does not administer is a 404, as one that does not exist.
        queryset = queryset.filter(**{field: selectors.project_get_for_admin(request.user, slug)})
    return queryset


def _target(objects: Any, project: Project, field: str, **lookup: Any) -> Any:
    found = objects.filter(**lookup).first()
    if found is None:
        raise ValidationError({field: [f"No such {field} in project {project.slug!r}."]})
    return found


@extend_schema_view(list=extend_schema(parameters=[_PROJECT]))
class RuleViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """``POST`` makes a rule (201); ``GET /rules/?project=SLUG`` lists them;
    ``POST /rules/{id}/backfill/`` runs it over the project's trajectories (202);
    ``POST /rules/{id}/active/`` turns it on or off; ``GET /rules/{id}/firings/`` says
    what it did, newest first."""

    serializer_class = RuleSerializer
    pagination_class = ByIdCursor

    def get_queryset(self) -> QuerySet[Rule]:
        queryset = (
            Rule.objects.filter(project__in=selectors.projects_administered(self.request.user))
            .select_related("project", "scorer")
            .annotate(firing_count=Count("firings"))
        )
        return cast(QuerySet[Rule], _in_project(queryset, self.request))

    @extend_schema(request=RuleCreateSerializer, responses={201: RuleSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = RuleCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        project = selectors.project_get_for_admin(request.user, data.pop("project"))
        targets: dict[str, Any] = {}
        if "queue" in data:
            queues = Queue.objects.filter(project=project)
            targets["queue"] = _target(queues, project, "queue", pk=data["queue"])
        if "webhook" in data:
            webhooks = Webhook.objects.filter(project=project)
            targets["webhook"] = _target(webhooks, project, "webhook", pk=data["webhook"])
        if "scorer" in data:
            shared_or_own = Q(project=project) | Q(project__isnull=True)
            scorers = Scorer.objects.filter(shared_or_own).order_by(
                F("project_id").asc(nulls_last=True)
            )
            targets["scorer"] = _target(scorers, project, "scorer", name=data["scorer"])
        try:
            rule = services.rule_create(
                project=project,
                name=data["name"],
                filters=data.get("selection") or TrajectoryFilters(),
                rate=data["rate"],
                action=data["action"],
                export=data.get("export"),
                user=cast(User, request.user),
                **targets,
            )
        except SelectionError as error:
            raise ValidationError({"selection": error.by_name()}) from None
        except services.RuleError as error:
            raise ValidationError({error.field: [error.message]}) from None
        if not data["active"]:
            services.rule_set_active(rule=rule, active=False)
        return Response(RuleSerializer(rule).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={202: RuleSerializer})
    @action(detail=True, methods=["post"])
    def backfill(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        rule = self.get_object()
        services.rule_backfill_start(rule=rule)
        return Response(RuleSerializer(rule).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=RuleActiveSerializer, responses=RuleSerializer)
    @action(detail=True, methods=["post"])
    def active(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        rule = self.get_object()
        incoming = RuleActiveSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        services.rule_set_active(rule=rule, active=incoming.validated_data["active"])
        return Response(RuleSerializer(rule).data)

    @extend_schema(responses=RuleFiringSerializer(many=True))
    @action(detail=True, methods=["get"])
    def firings(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        rule = self.get_object()
        page = self.paginate_queryset(rule.firings.order_by("-id"))
        return self.get_paginated_response(RuleFiringSerializer(page, many=True).data)


@extend_schema_view(list=extend_schema(parameters=[_PROJECT]))
class WebhookViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """``POST`` makes a webhook (201; the answer holds its secret, never shown again);
    ``GET /webhooks/?project=SLUG`` lists them; ``GET /webhooks/{id}/deliveries/`` lists
    its deliveries, newest first, with each attempt's response code;
    ``POST /webhooks/{id}/active/ {"active": false}`` switches it off (it receives
    nothing; a rule's deliveries wait) or on; ``DELETE /webhooks/{id}/`` deletes it and
    its deliveries (409 naming them while a rule calls it)."""

    serializer_class = WebhookSerializer
    pagination_class = ByIdCursor

    def get_queryset(self) -> QuerySet[Webhook]:
        queryset = Webhook.objects.filter(
            project__in=selectors.projects_administered(self.request.user)
        ).select_related("project")
        return cast(QuerySet[Webhook], _in_project(queryset, self.request))

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        incoming = WebhookCreateSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        project = selectors.project_get_for_admin(request.user, data.pop("project"))
        try:
            webhook, secret = services.webhook_create(
                project=project, user=cast(User, request.user), **data
            )
        except services.WebhookError as error:
            raise ValidationError({error.field: [error.message]}) from None
        answer = WebhookCreatedSerializer(webhook, context={"secret": secret})
        return Response(answer.data, status=status.HTTP_201_CREATED)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        try:
            services.webhook_delete(webhook=self.get_object())
        except services.WebhookError as error:
            return Response({error.field: [error.message]}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=WebhookActiveSerializer, responses=WebhookSerializer)
    @action(detail=True, methods=["post"])
    def active(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        webhook = self.get_object()
        incoming = WebhookActiveSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        services.webhook_set_active(webhook=webhook, active=incoming.validated_data["active"])
        return Response(WebhookSerializer(webhook).data)

    @extend_schema(responses=WebhookDeliverySerializer(many=True))
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        webhook = self.get_object()
        page = self.paginate_queryset(webhook.deliveries.order_by("-id"))
        return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)


class WebhookDeliveryViewSet(mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """``GET /webhook-deliveries/{id}/``; ``POST .../redeliver/`` sends it again now
    under the same ``webhook-id`` (202)."""

    serializer_class = WebhookDeliverySerializer

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        return WebhookDelivery.objects.filter(
            webhook__project__in=selectors.projects_administered(self.request.user)
        )

    @extend_schema(request=None, responses={202: WebhookDeliverySerializer})
    @action(detail=True, methods=["post"])
    def redeliver(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        try:
            delivery = services.webhook_redeliver(delivery=self.get_object())
        except services.WebhookError as error:
            return Response({error.field: [error.message]}, status=status.HTTP_409_CONFLICT)
        return Response(WebhookDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


router = SimpleRouter()
router.register("rules", RuleViewSet, basename="rule")
router.register("webhooks", WebhookViewSet, basename="webhook")
router.register("webhook-deliveries", WebhookDeliveryViewSet, basename="webhook-delivery")

urlpatterns: list[URLPattern | URLResolver] = [path("", include(router.urls))]
