"""The steps behind each number of the compare page: a confusion cell, a calibration bin,
a point of the length and position curves (:func:`compare_steps_page`), and the
trajectories behind the first-error metrics (:func:`first_error_page`). Each row links to
the trajectory page opened at its step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.urls import reverse

from evaluation import compare_metrics as cm
from evaluation.compare import (
    LENGTH_BUCKET_SQL,
    LIST_PAGE_SIZE,
    OUTCOME_SQL,
    POSITION_BUCKET_SQL,
    PREVIEW_CHARS,
    CompareQuery,
    base_sql,
    big_joins,
    slice_sql,
)
from labeling.selectors import STEPS_PAGE_SIZE
from labeling.sources import label_source_sql


def step_href(trajectory_id: int, index: int, step_id: int) -> str:
    """The trajectory page opened at a step (a later page of a long trajectory starts
    there)."""
    if index < STEPS_PAGE_SIZE:
        return reverse("trajectory-detail", args=[trajectory_id]) + f"#step-{step_id}"
    return reverse("trajectory-steps", args=[trajectory_id]) + f"?start={index}#step-{step_id}"


@dataclass(frozen=True)
class StepRow:
    step_id: int
    trajectory_id: int
    external_id: str
    index: int
    kind: str
    tool_name: str
    preview: str
    label: int | None
    score: float | None

    @property
    def href(self) -> str:
        return step_href(self.trajectory_id, self.index, self.step_id)


@dataclass(frozen=True)
class StepFilter:
    """Which steps a number stands for. ``label`` / ``predicted`` / ``decided`` /
    ``score_low``..``score_high`` select among steps with a reference label (a confusion
    cell, a calibration bin); ``position`` / ``length`` / ``outcome`` select among scored
    steps whether labelled or not (a point of the length and position curves)."""

    label: int | None = None
    predicted: str = ""  # "good" or "bad": the model's label at the threshold
    decided: bool = False  # only steps labelled good or bad (calibration)
    score_low: float | None = None
    score_high: float | None = None  # exclusive, except at 1
    position: int | None = None  # a bucket of POSITION_EDGES
    length: int | None = None  # a bucket of LENGTH_EDGES
    outcome: int | None = None  # the trajectory's: 1 success, 0 failure

    @property
    def needs_labels(self) -> bool:
        return self.label is not None or bool(self.predicted) or self.decided


_STEP_COLUMNS = (
    "s.id, s.trajectory_id, t.external_id, s.index, s.kind, s.tool_name,"
    f" left(s.content, {PREVIEW_CHARS})"
)


def compare_steps_page(
    query: CompareQuery,
    scale: cm.Scale,
    which: StepFilter,
    *,
    page: int = 1,
    size: int = LIST_PAGE_SIZE,
) -> tuple[list[StepRow], bool]:
    """One page of the steps behind a number, and whether there are more. Labelled
    steps come most-disagreeing first; scored ones in trajectory order."""
    conditions: list[str] = []
    params: list[Any] = []
    if which.predicted:
        conditions.append("sc.value >= %s" if which.predicted == "good" else "sc.value < %s")
        params.append(query.threshold)
    if which.label is not None:
        conditions.append("r.value = %s")
        params.append(which.label)
    if which.decided:
        conditions.append("r.value IN (%s, %s)")
        params.extend([scale.good, scale.bad])
    if which.score_low is not None:
        conditions.append("sc.value >= %s")
        params.append(which.score_low)
    if which.score_high is not None:
        conditions.append("sc.value < %s" if which.score_high < 1 else "sc.value <= %s")
        params.append(which.score_high)
    if which.position is not None:
        conditions.append(f"{POSITION_BUCKET_SQL} = %s")
        params.append(which.position)
    if which.length is not None:
        conditions.append(f"{LENGTH_BUCKET_SQL} = %s")
        params.append(which.length)
    if which.outcome is not None:
        conditions.append(f"{OUTCOME_SQL} = %s")
        params.append(which.outcome)
    extra = "".join(f" AND {c}" for c in conditions)
    offset = (max(page, 1) - 1) * size
    low, high = min(scale.values), max(scale.values)
    span = float(high - low) or 1.0
    if which.needs_labels:
        base, base_params = base_sql(query)
        sql = (
            f"SELECT {_STEP_COLUMNS}, r.value, sc.value {base}{extra}"
            f" ORDER BY abs(sc.value - (r.value - %s) / %s) DESC, s.trajectory_id, s.index"
            " LIMIT %s OFFSET %s"
        )
        all_params = [*base_params, *params, low, span, size + 1, offset]
    else:
        where, where_params = slice_sql(query.slice)
        sql = (
            f"SELECT {_STEP_COLUMNS}, NULL, sc.value FROM scoring_stepscore sc"
            " JOIN trajectories_step s ON s.id = sc.step_id"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            f" WHERE sc.scorer_id = %s AND t.project_id = %s AND s.labelable{where}{extra}"
            " ORDER BY s.trajectory_id, s.index LIMIT %s OFFSET %s"
        )
        all_params = [query.scorer.pk, query.project.pk, *where_params, *params, size + 1, offset]
    with transaction.atomic():
        big_joins(query.project)
        with connection.cursor() as cursor:
            cursor.execute(sql, all_params)
            fetched = cursor.fetchall()
    rows = [StepRow(*row) for row in fetched[:size]]
    if not which.needs_labels:
        rows = _with_labels(query, rows)
    return rows, len(fetched) > size


def _with_labels(query: CompareQuery, rows: list[StepRow]) -> list[StepRow]:
    """The reference labels of a page of steps, looked up for those steps only."""
    if not rows:
        return rows
    ref_sql, ref_params = label_source_sql(query.project, query.reference)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.step_id, r.value FROM ({ref_sql}) r WHERE r.step_id = ANY(%s)",
            [*ref_params, [row.step_id for row in rows]],
        )
        labels = dict(cursor.fetchall())
    return [StepRow(**{**row.__dict__, "label": labels.get(row.step_id)}) for row in rows]


@dataclass(frozen=True)
class FirstErrorRow:
    """A trajectory's first error by the reference labels and by the model (``None``:
    no error), each with the step it falls on."""

    trajectory_id: int
    external_id: str
    reference: int | None
    predicted: int | None
    reference_step: int | None
    predicted_step: int | None

    @property
    def right(self) -> bool:
        return self.reference == self.predicted

    @property
    def reference_href(self) -> str:
        return self._href(self.reference, self.reference_step)

    @property
    def predicted_href(self) -> str:
        return self._href(self.predicted, self.predicted_step)

    def _href(self, index: int | None, step: int | None) -> str:
        if index is None or step is None:
            return reverse("trajectory-detail", args=[self.trajectory_id])
        return step_href(self.trajectory_id, index, step)


FIRST_ERROR_SETS = {"all": "all", "erroneous": "with an error", "correct": "without an error"}
FIRST_ERROR_OUTCOMES = {"all": "all", "right": "found right", "wrong": "found wrong"}


def first_error_page(
    query: CompareQuery,
    scale: cm.Scale,
    *,
    subset: str = "all",
    outcome: str = "all",
    page: int = 1,
    size: int = LIST_PAGE_SIZE,
) -> tuple[list[FirstErrorRow], bool]:
    """Trajectories with their reference and predicted first errors at the query's
    threshold, over the same steps as the metrics (labelled and scored)."""
    base, params = base_sql(query)
    reference = "min(s.index) FILTER (WHERE r.value = %s)"
    predicted = "min(s.index) FILTER (WHERE sc.value < %s)"
    having: list[str] = []
    if subset == "erroneous":
        having.append(f"{reference} IS NOT NULL")
    elif subset == "correct":
        having.append(f"{reference} IS NULL")
    if outcome in ("right", "wrong"):
        compare_op = "IS NOT DISTINCT FROM" if outcome == "right" else "IS DISTINCT FROM"
        having.append(f"{reference} {compare_op} {predicted}")
    having_params: list[Any] = []
    for condition in having:
        having_params.append(scale.bad)
        if predicted in condition:
            having_params.append(query.threshold)
    sql = (
        f"SELECT s.trajectory_id, t.external_id, {reference}, {predicted} {base}"
        " GROUP BY s.trajectory_id, t.external_id"
        + (f" HAVING {' AND '.join(having)}" if having else "")
        + " ORDER BY s.trajectory_id LIMIT %s OFFSET %s"
    )
    with transaction.atomic():
        big_joins(query.project)
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                [
                    scale.bad,
                    query.threshold,
                    *params,
                    *having_params,
                    size + 1,
                    (max(page, 1) - 1) * size,
                ],
            )
            fetched = cursor.fetchall()
    found = fetched[:size]
    wanted = [(t, i) for t, _, ref, pred in found for i in (ref, pred) if i is not None]
    steps = _step_ids(wanted)
    rows = [
        FirstErrorRow(t, external, ref, pred, steps.get((t, ref)), steps.get((t, pred)))
        for t, external, ref, pred in found
    ]
    return rows, len(fetched) > size


def _step_ids(pairs: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    if not pairs:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.trajectory_id, s.index, s.id FROM trajectories_step s"
            " JOIN unnest(%s::bigint[], %s::int[]) AS w(trajectory_id, index)"
            " ON s.trajectory_id = w.trajectory_id AND s.index = w.index",
            [[t for t, _ in pairs], [i for _, i in pairs]],
        )
        return {(t, i): pk for t, i, pk in cursor.fetchall()}
