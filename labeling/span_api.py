"""REST endpoints for span labels, mounted with the label API (labeling/api.py).

``/trajectories/{id}/spans/`` lists the trajectory's spans that you may see (blind mode
applies as on the page), with the agreement between their annotators by overlap per
span schema, and (POST) gives a run of steps your value; ``/spans/{id}/`` reads one
span and (DELETE) removes one of yours. ``/trajectories/{id}/final-spans/`` lists the
adjudicated spans and (POST, researchers and admins) sets one, picking an annotator's
span or giving a range and value, as the span review page does; ``/final-spans/{id}/``
reads one and (DELETE) removes it. Writes go through the span services the pages use;
anything outside your projects is a 404.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.urls import URLPattern, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from labeling import selectors, services
from labeling.spans import MAX_SPAN_VALUE_CHARS, FinalSpan, SpanLabel
from stepscope.serializers import StrictSerializer
from stepscope.web import current_user
from trajectories.models import Project
from trajectories.selectors import membership_role, projects_for_user, trajectory_get_for_user

# What a span and a final span both show, in this order; each adds who gave it.
_SPAN_FIELDS = ["id", "trajectory", "schema", "schema_name", "start", "end", "value"]


class _SpanFieldsMixin(serializers.Serializer[Any]):
    """The schema's name and the range, as both span serializers show them."""

    schema_name = serializers.CharField(source="schema.name", read_only=True)
    start = serializers.IntegerField(source="start_index", read_only=True)
    end = serializers.IntegerField(source="end_index", read_only=True)


class SpanSerializer(_SpanFieldsMixin, serializers.ModelSerializer[SpanLabel]):
    annotator: serializers.SlugRelatedField[SpanLabel] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = SpanLabel
        fields = [*_SPAN_FIELDS, "annotator", "created_at", "updated_at"]
        read_only_fields = fields


class SpanWriteSerializer(StrictSerializer):
    """Your value on the steps ``start`` to ``end`` (both included)."""

    schema = serializers.CharField(max_length=100, help_text="a span schema's name or id")
    start = serializers.IntegerField(min_value=0)
    end = serializers.IntegerField(min_value=0)
    value = serializers.CharField(max_length=MAX_SPAN_VALUE_CHARS)
    queue = serializers.IntegerField(
        required=False, allow_null=True, help_text="the queue you leased the trajectory from"
    )


class FinalSpanSerializer(_SpanFieldsMixin, serializers.ModelSerializer[FinalSpan]):
    adjudicator: serializers.SlugRelatedField[FinalSpan] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = FinalSpan
        fields = [*_SPAN_FIELDS, "adjudicator", "created_at", "updated_at"]
        read_only_fields = fields


class FinalSpanWriteSerializer(StrictSerializer):
    """An annotator's span to make final (``pick``), or a range and value of your own."""

    pick = serializers.IntegerField(
        required=False, min_value=1, help_text="the id of an annotator's span to make final"
    )
    schema = serializers.CharField(
        required=False, max_length=100, help_text="a span schema's name or id"
    )
    start = serializers.IntegerField(required=False, min_value=0)
    end = serializers.IntegerField(required=False, min_value=0)
    value = serializers.CharField(required=False, max_length=MAX_SPAN_VALUE_CHARS)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        own = [name for name in ("schema", "start", "end", "value") if name in attrs]
        if "pick" in attrs:
            if own:
                raise serializers.ValidationError(
                    {"pick": f"Give pick alone, or schema, start, end and value; not {own}."}
                )
            return attrs
        missing = [name for name in ("schema", "start", "end", "value") if name not in attrs]
        if missing:
            raise serializers.ValidationError(
                {name: "This field is required (or give pick)." for name in missing}
            )
        return attrs


def _require_adjudicator(request: Request, project: Project) -> None:
    if not selectors.is_reviewer(membership_role(request.user, project)):
        raise PermissionDenied("Only researchers and admins set final spans.")


def _schema_ref(raw: str) -> int | str:
    return int(raw) if raw.isdigit() else raw


class TrajectorySpans(generics.GenericAPIView[SpanLabel]):
    """The spans of one trajectory that you may see, in step order, and ``agreement``:
    per span schema, the annotators' per-value IoU and per-step agreement."""

    serializer_class = SpanSerializer
    pagination_class = None

    def get(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)
        spans = list(selectors.spans_visible(state))
        agreement = selectors.span_agreement_by_schema(spans)
        return Response(
            {
                "spans": SpanSerializer(spans, many=True).data,
                "agreement": {name: found.as_json() for name, found in agreement.items()},
            }
        )

    @extend_schema(
        request=SpanWriteSerializer, responses={200: SpanSerializer, 201: SpanSerializer}
    )
    def post(self, request: Request, pk: int) -> Response:
        """Give the steps ``start`` to ``end`` your ``value`` under a span schema; 201
        when the span is new, 200 when it changed your value on the same range."""
        state = selectors.labeling_state_for_user(request.user, pk)
        incoming = SpanWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        if data.get("queue") is not None:
            state = selectors.labeling_state_for_user(request.user, pk, queue_id=data["queue"])
        try:
            span, created = services.span_label_set(
                state=state,
                schema=_schema_ref(data["schema"]),
                start=data["start"],
                end=data["end"],
                value=data["value"],
            )
        except services.LabelingError as error:
            return Response({error.field or "detail": error.message}, status=error.status)
        return Response(
            SpanSerializer(span).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


def _span_trajectory(request: Request, pk: int) -> int:
    """The trajectory of span ``pk``, if it is in one of the user's projects (else 404)."""
    found = (
        SpanLabel.objects.filter(pk=pk, trajectory__project__in=projects_for_user(request.user))
        .values_list("trajectory_id", flat=True)
        .first()
    )
    if found is None:
        raise Http404("No such span.")
    return int(found)


class SpanDetail(generics.GenericAPIView[SpanLabel]):
    """One span you may see; DELETE removes it if it is yours (kept in the history)."""

    serializer_class = SpanSerializer

    def get(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, _span_trajectory(request, pk))
        span = selectors.spans_visible(state).filter(pk=pk).first()
        if span is None:
            raise Http404("No such span.")
        return Response(SpanSerializer(span).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        queue = request.query_params.get("queue", "")
        state = selectors.labeling_state_for_user(
            request.user,
            _span_trajectory(request, pk),
            queue_id=int(queue) if queue.isdigit() else None,
        )
        try:
            services.span_label_delete(state=state, span_id=pk)
        except services.LabelingError as error:
            return Response({error.field or "detail": error.message}, status=error.status)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TrajectoryFinalSpans(generics.GenericAPIView[FinalSpan]):
    """The trajectory's final (adjudicated) spans, in step order: every member sees them,
    but an annotator of a blind project only once they submitted the trajectory. POST
    (researchers and admins) sets one, as the span review page does."""

    serializer_class = FinalSpanSerializer
    pagination_class = None

    def get(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, pk)
        finals = selectors.final_spans_visible(state)
        return Response({"final_spans": FinalSpanSerializer(finals, many=True).data})

    @extend_schema(
        request=FinalSpanWriteSerializer,
        responses={200: FinalSpanSerializer, 201: FinalSpanSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        """Make an annotator's span final (``pick``), or give ``start`` to ``end`` the
        final ``value`` under a span schema; the same range and schema again replaces
        the value. 201 when the final span is new, 200 when it changed."""
        trajectory = trajectory_get_for_user(request.user, pk)
        _require_adjudicator(request, trajectory.project)
        incoming = FinalSpanWriteSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            if "pick" in data:
                final, created = services.final_span_pick(
                    trajectory=trajectory, span_id=data["pick"], adjudicator=current_user(request)
                )
            else:
                final, created = services.final_span_set(
                    trajectory=trajectory,
                    schema=services.span_schema_of(
                        trajectory.project_id, _schema_ref(data["schema"])
                    ),
                    adjudicator=current_user(request),
                    start=data["start"],
                    end=data["end"],
                    value=data["value"],
                )
        except services.LabelingError as error:
            return Response({error.field or "detail": error.message}, status=error.status)
        return Response(
            FinalSpanSerializer(final).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class FinalSpanDetail(generics.GenericAPIView[FinalSpan]):
    """One final span you may see; DELETE (researchers and admins) removes it (kept in
    the history)."""

    serializer_class = FinalSpanSerializer

    def _trajectory_id(self, request: Request, pk: int) -> int:
        found = (
            FinalSpan.objects.filter(pk=pk, trajectory__project__in=projects_for_user(request.user))
            .values_list("trajectory_id", flat=True)
            .first()
        )
        if found is None:
            raise Http404("No such final span.")
        return int(found)

    def get(self, request: Request, pk: int) -> Response:
        state = selectors.labeling_state_for_user(request.user, self._trajectory_id(request, pk))
        final = selectors.final_spans_visible(state).filter(pk=pk).first()
        if final is None:
            raise Http404("No such final span.")
        return Response(FinalSpanSerializer(final).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: int) -> Response:
        trajectory = trajectory_get_for_user(request.user, self._trajectory_id(request, pk))
        _require_adjudicator(request, trajectory.project)
        try:
            services.final_span_delete(
                trajectory=trajectory, final_id=pk, adjudicator=current_user(request)
            )
        except services.LabelingError as error:
            return Response({error.field or "detail": error.message}, status=error.status)
        return Response(status=status.HTTP_204_NO_CONTENT)


urlpatterns: list[Any | URLPattern] = [
    path("trajectories/<int:pk>/spans/", TrajectorySpans.as_view(), name="api-trajectory-spans"),
    path("spans/<int:pk>/", SpanDetail.as_view(), name="api-span-detail"),
    path(
        "trajectories/<int:pk>/final-spans/",
        TrajectoryFinalSpans.as_view(),
        name="api-trajectory-final-spans",
    ),
    path("final-spans/<int:pk>/", FinalSpanDetail.as_view(), name="api-final-span-detail"),
]
