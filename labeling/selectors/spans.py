"""Reads for span labels: a project's active span schemas, the spans of a trajectory that
a user may see (blind mode hides others' as it hides their step labels), and the
history of a trajectory's spans."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.db.models import QuerySet

from labeling.selectors.surface import LabelingState
from labeling.spans import FinalSpan, SpanLabel, SpanLabelEvent, SpanSchema
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


def final_spans_visible(state: LabelingState) -> QuerySet[FinalSpan]:
    """The trajectory's final (adjudicated) spans this user may see: all of them, or none
    in blind mode before they submit (an adjudication shows the others' spans); in step
    order, the longer first where two start together."""
    finals = FinalSpan.objects.filter(trajectory_id=state.trajectory.pk).select_related(
        "adjudicator", "schema"
    )
    if state.blind:
        finals = finals.none()
    return finals.order_by("start_index", "-end_index", "schema__name", "id")


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


@dataclass(frozen=True)
class SpanReviewSpan:
    """One span on the review page: an annotator's (``id`` of the SpanLabel) or a final
    one (``id`` of the FinalSpan)."""

    id: int
    start: int
    end: int
    value: str
    color: str
    who: str


@dataclass(frozen=True)
class SpanReviewRow:
    """One step of the review grid: the values covering it, per annotator and final."""

    index: int
    cells: list[tuple[str, list[SpanReviewSpan]]]  # per annotator, by name
    final: list[SpanReviewSpan]
    disagreement: bool


@dataclass(frozen=True)
class SpanReview:
    """One span schema's review of a trajectory: the annotators side by side (their
    spans, a grid of steps with what covers each) and the adjudicated spans."""

    schema: SpanSchema
    annotators: list[str]
    spans: dict[str, list[SpanReviewSpan]]
    finals: list[SpanReviewSpan]
    rows: list[SpanReviewRow]
    agreement: SpanAgreement | None

    @property
    def named_spans(self) -> list[tuple[str, list[SpanReviewSpan]]]:
        return [(name, self.spans[name]) for name in self.annotators]


def span_review(trajectory_id: int, step_count: int, project_id: int) -> list[SpanReview]:
    """Per span schema that has spans or final spans on the trajectory (every active one
    otherwise shown empty), what the review page shows. Two queries whatever the
    number of schemas and annotators; steps covered by nobody are left out of the grid."""
    labels = list(
        SpanLabel.objects.filter(trajectory_id=trajectory_id)
        .select_related("annotator", "schema")
        .order_by("start_index", "-end_index", "id")
    )
    finals = list(
        FinalSpan.objects.filter(trajectory_id=trajectory_id)
        .select_related("adjudicator", "schema")
        .order_by("start_index", "-end_index", "id")
    )
    schemas = {s.pk: s for s in span_schemas_active(project_id)}
    for label in labels:
        schemas.setdefault(label.schema_id, label.schema)
    for adjudicated in finals:
        schemas.setdefault(adjudicated.schema_id, adjudicated.schema)
    reviews = []
    for schema in sorted(schemas.values(), key=lambda s: s.pk):
        colors = {e["value"]: e["color"] for e in schema.entries}

        def shown(
            row: SpanLabel | FinalSpan, who: str, colors: dict[str, str] = colors
        ) -> SpanReviewSpan:
            return SpanReviewSpan(
                row.pk,
                row.start_index,
                row.end_index,
                row.value,
                colors.get(row.value, "#6b7280"),
                who,
            )

        by_annotator: dict[str, list[SpanReviewSpan]] = {}
        for label in labels:
            if label.schema_id == schema.pk:
                name = label.annotator.get_username()
                by_annotator.setdefault(name, []).append(shown(label, name))
        final = [shown(f, f.adjudicator.get_username()) for f in finals if f.schema_id == schema.pk]
        names = sorted(by_annotator)
        rows = []
        for index in range(step_count):
            cells = [(n, [s for s in by_annotator[n] if s.start <= index <= s.end]) for n in names]
            covering = [s for s in final if s.start <= index <= s.end]
            if not any(cell for _, cell in cells) and not covering:
                continue
            seen = {frozenset(s.value for s in cell) for _, cell in cells}
            rows.append(SpanReviewRow(index, cells, covering, len(seen) > 1))
        agreement = None
        if len(names) > 1:
            agreement = span_agreement(
                {
                    n: [Span(trajectory_id, s.start, s.end, s.value) for s in by_annotator[n]]
                    for n in names
                },
                [e["value"] for e in schema.entries],
            )
        reviews.append(SpanReview(schema, names, by_annotator, final, rows, agreement))
    return reviews
