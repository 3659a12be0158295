"""REST endpoints for span labels, mounted with the label API (labeling/api.py).

``/trajectories/{id}/spans/`` lists the trajectory's spans that you may see (blind mode
applies as on the page), with the agreement between their annotators by overlap per
span schema, and (POST) gives a run of steps your value; ``/spans/{id}/`` reads one
span and (DELETE) removes one of yours. Writes go through the span services the page
uses; anything outside your projects is a 404.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from django.urls import URLPattern, path
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from labeling import selectors, services
from labeling.spans import MAX_SPAN_VALUE_CHARS, SpanLabel
from stepscope.serializers import StrictSerializer
from trajectories.selectors import projects_for_user


class SpanSerializer(serializers.ModelSerializer[SpanLabel]):
    annotator: serializers.SlugRelatedField[SpanLabel] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    schema_name = serializers.CharField(source="schema.name", read_only=True)
    start = serializers.IntegerField(source="start_index", read_only=True)
    end = serializers.IntegerField(source="end_index", read_only=True)

    class Meta:
        model = SpanLabel
        fields = [
            "id",
            "trajectory",
            "schema",
            "schema_name",
            "start",
            "end",
            "value",
            "annotator",
            "created_at",
            "updated_at",
        ]
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


urlpatterns: list[Any | URLPattern] = [
    path("trajectories/<int:pk>/spans/", TrajectorySpans.as_view(), name="api-trajectory-spans"),
    path("spans/<int:pk>/", SpanDetail.as_view(), name="api-span-detail"),
]
