"""REST endpoints of this app, mounted under /api/v1/ by stepscope/api_urls.py.

``/labels/`` lists the labels the user may see (blind mode applies as on the pages) and
upserts the user's own label through the same service as the pages; ``/labels/bulk/``
sets many in one all-or-nothing request; ``/trajectories/{id}/labels/`` lists one
trajectory's and ``/trajectories/{id}/submit/`` finishes it (the labels then count as
submitted: for ``human:<user>``, the majority, compare and exports). ``/queues/`` lists
the queues the user can work on; ``{id}/lease/`` (GET), ``next/``, ``skip/`` and
``submit/`` are the queue page's buttons. Every write goes through the labeling services
the pages use. Anything outside the user's projects is a 404.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, mixins, pagination, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import DefaultRouter

from labeling import selectors, services, span_api
from labeling.api_rubrics import urlpatterns as rubric_urls
from labeling.models import Queue, QueueAssignment, StepLabel
from labeling.serializers import (
    BulkLabelsSerializer,
    DecisiveWriteSerializer,
    LeaseSerializer,
    QueueSerializer,
    StepLabelSerializer,
    StepLabelWriteSerializer,
    TrajectoryLabelSerializer,
    TrajectorySubmitSerializer,
    VerdictWriteSerializer,
)
from stepscope.pagination import ByIdCursor
from stepscope.throttling import BULK_THROTTLES
from trajectories.selectors import (
    step_get_for_user,
    trajectory_get_for_user,
)

_VERDICT_FIELDS = ("outcome", "finish_reason", "comment", "flagged")


class LabelCursor(pagination.CursorPagination):
    ordering = "-id"
    page_size = 500


_FILTERS = [
    OpenApiParameter("project", str, description="project slug"),
    OpenApiParameter("trajectory", int),
    OpenApiParameter("step", int),
    OpenApiParameter("annotator", str, description="username"),
    OpenApiParameter("schema", int, description="a schema version's id"),
    OpenApiParameter("schema_name", str, description="a schema's name: all its versions"),
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
    if params.get("schema_name"):
        queryset = queryset.filter(schema__name=params["schema_name"])
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

    @extend_schema(request=BulkLabelsSerializer, responses={200: StepLabelSerializer(many=True)})
    @action(detail=False, methods=["post"], throttle_classes=BULK_THROTTLES)
    def bulk(self, request: Request, **kwargs: Any) -> Response:
        """Set many of your labels in one request (a whole trajectory's, or steps across
        trajectories): all or nothing. A refused batch answers with every refused item by
        its index and field, ``{"labels": {"3": {"value": "…"}}}``, and writes nothing.
        ``submit`` then submits each trajectory the labels touch."""
        incoming = BulkLabelsSerializer(data=request.data)
        if not incoming.is_valid():
            return Response(_flat(incoming.errors), status=400)
        data = incoming.validated_data
        try:
            result = services.step_labels_set(
                user=request.user,
                items=data["labels"],
                queue_id=data.get("queue"),
                schema_id=data.get("schema"),
                submit=data["submit"],
                verdict={name: data[name] for name in _VERDICT_FIELDS},
            )
        except services.BulkLabelsRejected as rejected:
            errors: dict[str, Any] = {
                "labels": {k: v for k, v in rejected.errors.items() if k != "submit"}
            }
            if "submit" in rejected.errors:
                errors["submit"] = rejected.errors["submit"]
            return Response({k: v for k, v in errors.items() if v}, status=rejected.status)
        return Response(
            {
                "created": sum(1 for r in result.labels if r.created),
                "updated": sum(1 for r in result.labels if not r.created),
                "labels": _labels_data([r.label_id for r in result.labels]),
                "submitted": TrajectoryLabelSerializer(result.submitted, many=True).data,
            }
        )


# StepLabelSerializer's fields and the column each reads, for ``_labels_data``; the
# relations it shows as their key are read as the key itself.
_LABEL_COLUMNS = {name: name for name in StepLabelSerializer.Meta.fields} | {
    "step": "step_id",
    "step_index": "step__index",
    "trajectory": "step__trajectory_id",
    "annotator": "annotator__username",
    "schema": "schema_id",
    "schema_name": "schema__name",
    "schema_version": "schema__version",
}
_LABEL_KEYS = ("step", "annotator", "schema")


@functools.cache
def _label_fields() -> list[tuple[str, Any, bool]]:
    fields = StepLabelSerializer().fields
    return [(name, fields[name], name in _LABEL_KEYS) for name in _LABEL_COLUMNS]


def _labels_data(ids: list[int]) -> list[dict[str, Any]]:
    """``StepLabelSerializer(labels, many=True).data`` of the labels ``ids``, in that
    order, from one query of plain values: a batch answers with every label it wrote,
    and three model instances and a serializer pass a label were most of its time. Each
    value goes through the serializer's own field, so the answer is the same."""
    rows = StepLabel.objects.filter(pk__in=ids).values_list(*_LABEL_COLUMNS.values())
    by_id = {row[0]: row for row in rows}
    fields = _label_fields()
    return [
        {
            name: value if value is None or key else field.to_representation(value)
            for (name, field, key), value in zip(fields, by_id[pk], strict=True)
        }
        for pk in ids
    ]


def _flat(errors: Any) -> Any:
    """DRF's error lists as one sentence per field, the shape the label service's own
    refusals have, so a client reads one format."""
    if isinstance(errors, dict):
        return {str(key): _flat(value) for key, value in errors.items()}
    if isinstance(errors, list) and all(isinstance(e, str) for e in errors):
        return " ".join(errors)
    if isinstance(errors, list):
        return [_flat(e) for e in errors]
    return errors


class TrajectorySubmit(generics.GenericAPIView[Any]):
    """Finish your work on a trajectory, as the page's finish button does: your labels,
    verdict and lease become submitted (which also lifts blind mode for you). Every step
    you were asked to label needs a label unless ``finish_reason`` is ``give_up`` or
    ``bad_problem``."""

    serializer_class = TrajectorySubmitSerializer

    @extend_schema(request=TrajectorySubmitSerializer, responses={200: TrajectoryLabelSerializer})
    def post(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)
        incoming = TrajectorySubmitSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if data.get("queue") is not None:
            state = selectors.labeling_state_for_user(request.user, pk, queue_id=data["queue"])
        return _submit(state, data)


def _submit(state: selectors.LabelingState, data: dict[str, Any]) -> Response:
    try:
        verdict = services.trajectory_submit(
            state=state, **{name: data[name] for name in _VERDICT_FIELDS}
        )
    except services.LabelingError as error:
        return Response({error.field or "detail": error.message}, status=error.status)
    return Response(TrajectoryLabelSerializer(verdict).data)


class DecisiveFailure(generics.GenericAPIView[Any]):
    """Set your decisive failure on a trajectory (the page's panel, key ``d``): which
    agent, at which step, decided that it failed. The step must be one of the
    trajectory's and the agent one of its agents; an error names the field. It counts
    as a label source (``human:<you>``) once you submit the trajectory."""

    serializer_class = DecisiveWriteSerializer

    @extend_schema(request=DecisiveWriteSerializer, responses={200: TrajectoryLabelSerializer})
    def post(self, request: Request, pk: int) -> Response:
        incoming = DecisiveWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        state = selectors.labeling_state_for_user(request.user, pk, queue_id=data.get("queue"))
        try:
            verdict = services.decisive_failure_set(
                state=state, agent=data["agent"], step=data["step"], reason=data["reason"]
            )
        except services.LabelingError as error:
            return Response({error.field or "detail": error.message}, status=error.status)
        return Response(TrajectoryLabelSerializer(verdict).data)


class QueueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """The queues you can work on (``?project=SLUG`` narrows them). Work through one as
    the queue page does: ``next/`` leases the next trajectory (your open lease first),
    label it with ``queue`` set, then ``submit/``; ``skip/`` gives it back."""

    serializer_class = QueueSerializer
    pagination_class = ByIdCursor
    lookup_value_regex = "[0-9]+"

    def get_queryset(self) -> QuerySet[Queue]:
        queryset = selectors.queues_for_user(self.request.user)
        if self.request.query_params.get("project"):
            queryset = queryset.filter(project__slug=self.request.query_params["project"])
        return queryset

    def _queue(self, pk: str | None) -> Queue:
        queue, _ = selectors.queue_get_for_user(self.request.user, int(pk or 0))
        return queue

    def _open_lease(self, queue: Queue) -> QueueAssignment | None:
        return (
            QueueAssignment.objects.filter(
                item__queue=queue,
                annotator_id=self.request.user.pk,
                status=QueueAssignment.Status.LEASED,
            )
            .select_related("item")
            .order_by("-leased_at")
            .first()
        )

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        queue = self._queue(kwargs.get("pk"))
        progress = selectors.queue_progress(queue, request.user)
        return Response(
            {
                **QueueSerializer(queue).data,
                "progress": {
                    "items": progress.items,
                    "complete": progress.complete,
                    "mine": progress.mine,
                },
                # Per span schema the queue asks for: items with a span of it or submitted.
                "span_progress": [
                    {"schema": p.schema, "items": p.items, "done": p.done, "mine": p.mine}
                    for p in selectors.queue_span_progress(queue, request.user)
                ],
            }
        )

    @extend_schema(responses={200: LeaseSerializer})
    @action(detail=True, methods=["get"])
    def lease(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Your open lease in this queue; ``{"lease": null}`` when you hold none."""
        lease = self._open_lease(self._queue(pk))
        return Response({"lease": LeaseSerializer(lease).data if lease else None})

    @extend_schema(request=None, responses={200: LeaseSerializer})
    @action(detail=True, methods=["post"])
    def next(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Lease the next trajectory for you: your open lease while you have one (submit
        or skip it to move on), else the next item with room under the queue's overlap.
        ``{"lease": null}`` when nothing is left for you."""
        queue = self._queue(pk)
        try:
            lease = services.queue_item_take(queue=queue, annotator=cast(User, request.user))
        except services.LabelingError as error:
            return Response({"detail": error.message}, status=error.status)
        if lease is None:
            return Response({"lease": None, "detail": f"Nothing left for you in {queue.name}."})
        return Response({"lease": LeaseSerializer(lease).data})

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def skip(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Give back your open lease; it will not come back to you. Your labels on it
        are kept."""
        released = services.queue_assignment_release(
            queue=self._queue(pk), annotator=cast(User, request.user)
        )
        return Response({"skipped": released})

    @extend_schema(request=VerdictWriteSerializer, responses={200: TrajectoryLabelSerializer})
    @action(detail=True, methods=["post"])
    def submit(self, request: Request, pk: str | None = None, **kwargs: Any) -> Response:
        """Submit the trajectory of your open lease (the verdict fields as in
        ``/trajectories/{id}/submit/``)."""
        queue = self._queue(pk)
        incoming = VerdictWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        lease = self._open_lease(queue)
        if lease is None:
            raise ValidationError(
                {"detail": "You hold no lease in this queue; take one with next/."}, code="lease"
            )
        state = selectors.labeling_state_for_user(
            request.user, lease.item.trajectory_id, queue_id=queue.pk
        )
        return _submit(state, incoming.validated_data)


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
router.register("queues", QueueViewSet, basename="api-queue")

urlpatterns: list[URLPattern | URLResolver] = [
    path("trajectories/<int:pk>/labels/", TrajectoryLabelList.as_view(), name="trajectory-labels"),
    path("trajectories/<int:pk>/submit/", TrajectorySubmit.as_view(), name="api-trajectory-submit"),
    path(
        "trajectories/<int:pk>/decisive/",
        DecisiveFailure.as_view(),
        name="api-trajectory-decisive",
    ),
    # Rubrics and episode verdicts (labeling/api_rubrics.py).
    *rubric_urls,
    path("", include(router.urls)),
]
# Span labels (labeling/span_api.py).
urlpatterns += span_api.urlpatterns
