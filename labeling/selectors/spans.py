"""Reads for span labels: a project's active span schemas, the spans of a trajectory that
a user may see (blind mode hides others' as it hides their step labels), and the
history of a trajectory's spans."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import QuerySet

from labeling.selectors.surface import LabelingState
from labeling.spans import SpanLabel, SpanLabelEvent, SpanSchema
from metrics.spans import Span, SpanAgreement, span_agreement


def span_schemas_active(project_id: int) -> list[SpanSchema]:
    """The project's active span schemas, the first made first."""
    return list(SpanSchema.objects.filter(project_id=project_id, is_active=True).order_by("id"))


def spans_visible(state: LabelingState) -> QuerySet[SpanLabel]:
    """The trajectory's spans this user may see: all of them, or in blind mode before
    they submit, only their own; in step order, the longer first where two start
    together (so an enclosing span is drawn outside the one it holds)."""
    spans = SpanLabel.objects.filter(trajectory_id=state.trajectory.pk).select_related(
        "annotator", "schema"
    )
    if state.blind:
        spans = spans.filter(annotator_id=state.user_id)
    return spans.order_by("start_index", "-end_index", "annotator__username", "id")


@dataclass(frozen=True)
class SpanHistoryEntry:
    at: dt.datetime
    annotator: str
    action: str  # created, changed, removed
    schema: str
    start: int
    end: int
    value: str


def span_history(state: LabelingState) -> list[SpanHistoryEntry]:
    """Every recorded change to the trajectory's spans, oldest first; in blind mode, only
    this user's own."""
    events = SpanLabelEvent.objects.filter(trajectory_id=state.trajectory.pk).order_by("pgh_id")
    if state.blind:
        events = events.filter(annotator_id=state.user_id)
    rows = events.values(
        "pgh_created_at",
        "pgh_label",
        "annotator__username",
        "schema__name",
        "start_index",
        "end_index",
        "value",
    )
    actions = {"insert": "created", "update": "changed", "delete": "removed"}
    return [
        SpanHistoryEntry(
            at=r["pgh_created_at"],
            annotator=r["annotator__username"] or "?",
            action=actions[r["pgh_label"]],
            schema=r["schema__name"] or "?",
            start=r["start_index"],
            end=r["end_index"],
            value=r["value"],
        )
        for r in rows
    ]


def span_agreement_by_schema(spans: list[SpanLabel]) -> dict[str, SpanAgreement]:
    """Agreement by overlap (``metrics.spans``: per-value IoU and per-step agreement)
    between the annotators of ``spans``, per span schema by name, reporting each
    schema's values in its order."""
    by_schema: dict[str, dict[str, list[Span]]] = {}
    schemas: dict[str, SpanSchema] = {}
    for span in spans:
        schemas.setdefault(span.schema.name, span.schema)
        by_schema.setdefault(span.schema.name, {}).setdefault(span.annotator.username, []).append(
            Span(span.trajectory_id, span.start_index, span.end_index, span.value)
        )
    return {
        name: span_agreement(by_annotator, [e["value"] for e in schemas[name].entries])
        for name, by_annotator in by_schema.items()
    }
