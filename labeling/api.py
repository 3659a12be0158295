"""REST endpoints of this app, mounted under /api/v1/ by stepscope/api_urls.py.

``/labels/`` lists the labels the user may see (blind mode applies as on the pages) and
upserts the user's own label through the same service as the pages;
``/trajectories/{id}/labels/`` lists one trajectory's. ``/compare/`` compares a scorer with
a label source, as ``manage.py compare --json`` prints it. Anything outside the user's
projects is a 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, mixins, pagination, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter

from labeling import selectors, services
from labeling.models import StepLabel
from labeling.serializers import (
    StepLabelSerializer,
    StepLabelWriteSerializer,
)
from trajectories.selectors import (
    step_get_for_user,
    trajectory_get_for_user,
)


class LabelCursor(pagination.CursorPagination):
    ordering = "-id"
    page_size = 500


_FILTERS = [
    OpenApiParameter("project", str, description="project slug"),
    OpenApiParameter("trajectory", int),
    OpenApiParameter("step", int),
    OpenApiParameter("annotator", str, description="username"),
    OpenApiParameter("schema", int),
    OpenApiParameter("status", str, enum=StepLabel.Status.values),
    OpenApiParameter("value", int),
]


def _filtered(queryset: QuerySet[StepLabel], params: Any) -> QuerySet[StepLabel]:
    def number(name: str) -> int | None:
        raw = params.get(name, "")
        return int(raw) if raw.lstrip("-").isdigit() else (-1 if raw else None)

    if params.get("project"):
        queryset = queryset.filter(step__trajectory__project__slug=params["project"])
    if params.get("annotator"):
        queryset = queryset.filter(annotator__username=params["annotator"])
    if params.get("status"):
        queryset = queryset.filter(status=params["status"])
    for name, lookup in (
        ("trajectory", "step__trajectory_id"),
        ("step", "step_id"),
        ("schema", "schema_id"),
        ("value", "value"),
    ):
        given = number(name)
        if given is not None:
            queryset = queryset.filter(**{lookup: given})
    return queryset


class LabelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = StepLabelSerializer
    pagination_class = LabelCursor

    def get_queryset(self) -> QuerySet[StepLabel]:
        queryset = selectors.labels_visible_to(self.request.user).select_related(
            "annotator", "schema", "step"
        )
        return _filtered(queryset, self.request.query_params)

    @extend_schema(parameters=_FILTERS)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=StepLabelWriteSerializer,
        responses={200: StepLabelSerializer, 201: StepLabelSerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Set your label on a step; 201 when it is new, 200 when it updated yours."""
        write = StepLabelWriteSerializer(data=request.data)
        write.is_valid(raise_exception=True)
        data = dict(write.validated_data)
        step = step_get_for_user(request.user, int(data.pop("step")))
        state = selectors.labeling_state_for_user(
            request.user, step.trajectory_id, queue_id=data.pop("queue", None)
        )
        try:
            result = services.step_label_set(
                state=state,
                step=step,
                schema_id=data.pop("schema", None),
                **{k: v for k, v in data.items() if v is not None or k == "value"},
            )
        except services.LabelingError as error:
            return Response({"detail": error.message}, status=error.status)
        label = StepLabel.objects.select_related("annotator", "schema", "step").get(
            pk=result.label_id
        )
        return Response(
            StepLabelSerializer(label).data,
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )


class TrajectoryLabelList(generics.ListAPIView[StepLabel]):
    """The labels on one trajectory that you may see, in step order."""

    serializer_class = StepLabelSerializer
    pagination_class = None

    def get_queryset(self) -> QuerySet[StepLabel]:
        trajectory = trajectory_get_for_user(self.request.user, int(self.kwargs["pk"]))
        return (
            selectors.labels_visible_to(self.request.user)
            .filter(step__trajectory=trajectory)
            .select_related("annotator", "schema", "step")
            .order_by("step__index", "annotator__username")
        )


router = DefaultRouter()
router.register("labels", LabelViewSet, basename="label")

urlpatterns: list[URLPattern | URLResolver] = [
    path("trajectories/<int:pk>/labels/", TrajectoryLabelList.as_view(), name="trajectory-labels"),
    path("", include(router.urls)),
]
