"""Agreement between annotators' span labels over a project, per span schema and per
pair of annotators, for the "between humans" page: the per-value IoU and the per-step
agreement of ``metrics.spans``, over the trajectories both annotators put spans of the
schema on (a trajectory one of them left alone says nothing about their agreement)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

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


def span_agreement_pairs(project: Project) -> list[SpanSchemaAgreement]:
    """Per span schema of the project that two annotators used, every pair of its
    annotators who share a trajectory, by name. One query."""
    rows = (
        SpanLabel.objects.filter(schema__project=project)
        .values_list(
            "schema_id", "annotator__username", "trajectory_id", "start_index", "end_index", "value"
        )
        .order_by("schema_id", "annotator__username", "trajectory_id", "start_index")
    )
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
