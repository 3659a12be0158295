"""Where the model and the humans disagree most, and a review queue made from it.

A step's disagreement is ``|score - label|`` with the label put on the score's scale (bad
0, good 1, neutral halfway). Steps the model is sure are good but the humans say are bad
(missed errors) come first: they are the ones a PRM used for search or training gets
most wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from evaluation import compare_metrics as cm
from evaluation.compare import LIST_PAGE_SIZE, PREVIEW_CHARS, CompareQuery, base_sql, big_joins
from evaluation.compare_steps import StepRow
from labeling.models import Queue
from labeling.selectors import LabelingSettings
from labeling.services import LabelingError, queue_items_insert

KINDS = {
    "all": "all disagreements",
    "missed": "humans say bad, model says good",
    "false_alarm": "humans say good, model says bad",
}
DEFAULT_MIN_GAP = 0.5
# A queue made from disagreements holds at most this many trajectories, worst first.
QUEUE_LIMIT = 500


@dataclass(frozen=True)
class DisagreementFilter:
    kind: str = "all"
    min_gap: float = DEFAULT_MIN_GAP

    def params(self) -> dict[str, str]:
        return {"kind": self.kind, "min_gap": f"{self.min_gap:g}"}


@dataclass(frozen=True)
class Disagreement:
    step: StepRow
    gap: float
    missed: bool  # humans say bad, the model says good


@dataclass(frozen=True)
class _Sql:
    where: str  # FROM ... WHERE ... of the disagreeing steps
    where_params: list[Any]
    gap: str
    gap_params: list[Any]
    missed: str
    missed_params: list[Any]


def _disagreement_sql(query: CompareQuery, scale: cm.Scale, which: DisagreementFilter) -> _Sql:
    base, base_params = base_sql(query)
    low, high = min(scale.values), max(scale.values)
    gap = "abs(sc.value - (r.value - %s)::float8 / %s)"
    gap_params: list[Any] = [low, float(high - low) or 1.0]
    missed = "(r.value = %s AND sc.value >= %s)"
    missed_params: list[Any] = [scale.bad, query.threshold]
    where = f"{base} AND {gap} >= %s"
    params: list[Any] = [*base_params, *gap_params, which.min_gap]
    if which.kind == "missed":
        where += f" AND {missed}"
        params.extend(missed_params)
    elif which.kind == "false_alarm":
        where += " AND r.value = %s AND sc.value < %s"
        params.extend([scale.good, query.threshold])
    return _Sql(where, params, gap, gap_params, missed, missed_params)


def disagreements_page(
    query: CompareQuery,
    scale: cm.Scale,
    which: DisagreementFilter,
    *,
    page: int = 1,
    size: int = LIST_PAGE_SIZE,
) -> tuple[list[Disagreement], bool]:
    """One page of disagreeing steps: missed errors first, then by the gap, largest
    first; and whether there are more."""
    q = _disagreement_sql(query, scale, which)
    sql = (
        "SELECT s.id, s.trajectory_id, t.external_id, s.index, s.kind, s.tool_name,"
        f" left(s.content, {PREVIEW_CHARS}), r.value, sc.value, {q.gap} AS gap,"
        f" {q.missed} AS missed {q.where}"
        " ORDER BY missed DESC, gap DESC, s.trajectory_id, s.index LIMIT %s OFFSET %s"
    )
    params = [*q.gap_params, *q.missed_params, *q.where_params]
    with transaction.atomic():
        big_joins(query.project)
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params, size + 1, (max(page, 1) - 1) * size])
            fetched = cursor.fetchall()
    rows = [
        Disagreement(step=StepRow(*row[:9]), gap=float(row[9]), missed=bool(row[10]))
        for row in fetched[:size]
    ]
    return rows, len(fetched) > size


def disagreement_queue_create(
    *,
    query: CompareQuery,
    scale: cm.Scale,
    which: DisagreementFilter,
    created_by: User,
    name: str = "",
    limit: int = QUEUE_LIMIT,
) -> Queue:
    """A labeling queue over the trajectories that hold the disagreeing steps, the one
    with the worst step first (missed errors before the rest), at most ``limit``; its
    overlap is the project's labels per step. Inserted in one statement."""
    name = name or (
        f"Disagreements: {query.scorer.name} vs {query.reference}"
        f" ({timezone.localtime():%Y-%m-%d %H:%M:%S})"
    )
    if Queue.objects.filter(project=query.project, name=name).exists():
        raise LabelingError(f"A queue named {name!r} exists already.")
    q = _disagreement_sql(query, scale, which)
    with transaction.atomic():
        queue = Queue.objects.create(
            project=query.project,
            name=name[:200],
            description=(
                f"Steps where {query.scorer.name} and {query.reference} disagree"
                f" ({cm.finite(which.min_gap)} or more apart; {KINDS[which.kind]})."
            ),
            overlap=LabelingSettings.of(query.project).labels_per_step,
            created_by=created_by,
            selection={
                "compare": {
                    **query.params(),
                    "labels": str(query.reference),
                    **which.params(),
                    "limit": limit,
                }
            },
        )
        big_joins(query.project)
        # Each trajectory ranks by its worst step: (missed error first, larger gap
        # first, then id) compared as an array.
        queue_items_insert(
            queue=queue,
            ranked_sql=(
                f"SELECT s.trajectory_id, min(ARRAY[CASE WHEN {q.missed} THEN 0 ELSE 1 END,"
                f" -{q.gap}, s.trajectory_id]) AS rank"
                f" {q.where} GROUP BY s.trajectory_id ORDER BY rank LIMIT %s"
            ),
            params=[*q.missed_params, *q.gap_params, *q.where_params, limit],
        )
    return queue
