"""Agreement between annotators' span labels over a project, per span schema and per
pair of annotators, for the "between humans" page: the per-value IoU and the per-step
agreement of ``metrics.spans``, over the trajectories both annotators put spans of the
schema on (a trajectory one of them left alone says nothing about their agreement).

The page's ``?slice=`` narrows it as it narrows the step tables where a span can follow:
a trajectory slice (model, source format, task, length) keeps the spans on those
trajectories, an annotator slice the pairs with that annotator. A step-kind slice
selects single steps, which runs of steps do not follow: the table then stays over the
whole project and says so (``SpanAgreement.sliced``)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from django.db.models.expressions import RawSQL

from evaluation.compare import Slice, slice_sql
from labeling.models import SpanLabel, SpanSchema
from metrics.spans import Span, step_agreement, value_iou
from trajectories.models import Project


@dataclass(frozen=True)
class SpanPair:
    first: str
    second: str
    trajectories: int  # both put spans of the schema on them
    iou: list[tuple[str, float | None]]  # per value of the schema, in its order
    step_agreement: float | None


@dataclass(frozen=True)
class SpanSchemaAgreement:
    schema: str
    values: list[str]
    pairs: list[SpanPair]


# The slice dimensions that pick whole trajectories, and so whole spans.
TRAJECTORY_SLICES = ("model", "format", "task", "length")


def span_slice_applies(piece: Slice | None) -> bool:
    """Whether the span table follows ``piece`` (else it is over the whole project)."""
    return piece is None or piece.dimension in (*TRAJECTORY_SLICES, "annotator")


def span_agreement_pairs(project: Project, piece: Slice | None = None) -> list[SpanSchemaAgreement]:
    """Per span schema of the project that two annotators used, every pair of its
    annotators who share a trajectory, by name, in the slice ``piece`` where it applies
    (:func:`span_slice_applies`). Two queries."""
    spans = SpanLabel.objects.filter(schema__project=project)
    if piece is not None and piece.dimension in TRAJECTORY_SLICES:
        where, params = slice_sql(piece)
        spans = spans.filter(
            trajectory_id__in=RawSQL(
                f"SELECT t.id FROM trajectories_trajectory t WHERE t.project_id = %s{where}",
                [project.pk, *params],
            )
        )
    only = piece.value if piece is not None and piece.dimension == "annotator" else None
    rows = spans.values_list(
        "schema_id", "annotator__username", "trajectory_id", "start_index", "end_index", "value"
    ).order_by("schema_id", "annotator__username", "trajectory_id", "start_index")
    by_schema: dict[int, dict[str, list[Span]]] = {}
    for schema_id, who, trajectory, start, end, value in rows:
        by_schema.setdefault(schema_id, {}).setdefault(who, []).append(
            Span(trajectory, start, end, value)
        )
    schemas = {s.pk: s for s in SpanSchema.objects.filter(pk__in=by_schema)}
    result = []
    for schema_id, by_annotator in sorted(by_schema.items()):
        schema = schemas[schema_id]
        values = [e["value"] for e in schema.entries]
        pairs = []
        for first, second in combinations(sorted(by_annotator), 2):
            if only is not None and only not in (first, second):
                continue
            shared = {s.trajectory for s in by_annotator[first]} & {
                s.trajectory for s in by_annotator[second]
            }
            if not shared:
                continue
            a = [s for s in by_annotator[first] if s.trajectory in shared]
            b = [s for s in by_annotator[second] if s.trajectory in shared]
            pairs.append(
                SpanPair(
                    first=first,
                    second=second,
                    trajectories=len(shared),
                    iou=[(value, value_iou(a, b, value)) for value in values],
                    step_agreement=step_agreement(a, b),
                )
            )
        if pairs:
            result.append(SpanSchemaAgreement(schema=schema.name, values=values, pairs=pairs))
    return result
