"""The trajectory list's score column, registered with trajectories' list by
``ScoringConfig.ready()``: it reads scoring's tables, which trajectories may not.

Latest score: the lowest step score of the trajectory's latest scoring run (the run with
the highest id among its steps' scores), as a PRM's min aggregation reads a trajectory.
"""

from __future__ import annotations

from typing import Any

from django.db.models import FloatField, Max, Min, OuterRef, Subquery

from labeling.selectors.surface import LabelingSettings, is_reviewer
from scoring.models import AttributionRun, StepCredit, StepScore
from trajectories.columns import ListColumn, trajectory_column_register
from trajectories.models import Project, Trajectory


def _score_annotations(project: Project) -> dict[str, Any]:
    scores = StepScore.objects.filter(step__trajectory=OuterRef(OuterRef("pk")))
    latest_run = (
        scores.order_by().values("step__trajectory").annotate(run=Max("run_id")).values("run")
    )
    lowest = (
        StepScore.objects.filter(step__trajectory=OuterRef("pk"), run_id=Subquery(latest_run))
        .order_by()
        .values("step__trajectory")
        .annotate(low=Min("value"))
        .values("low")
    )
    return {"list_min_score": Subquery(lowest, output_field=FloatField())}


def _shown(project: Project, role: str | None) -> bool:
    """A project that hides model scores from annotators hides this column from them."""
    return is_reviewer(role) or not LabelingSettings.of(project).hide_model_scores


def _score_cell(row: Trajectory) -> str:
    score = getattr(row, "list_min_score", None)
    return "—" if score is None else f"{score:.3f}"


trajectory_column_register(
    ListColumn(
        name="latest_score",
        header="Min score",
        annotations=_score_annotations,
        cell=_score_cell,
        numeric=True,
        help="the lowest step score of the latest scoring run",
        sort="list_min_score",
        shown=_shown,
    )
)


def _credit_annotations(project: Project) -> dict[str, Any]:
    credits = StepCredit.objects.exclude(run__method=AttributionRun.Method.TOKEN_SALIENCY)
    latest_run = (
        credits.filter(step__trajectory=OuterRef(OuterRef("pk")))
        .order_by()
        .values("step__trajectory")
        .annotate(run=Max("run_id"))
        .values("run")
    )
    lowest = (
        StepCredit.objects.filter(step__trajectory=OuterRef("pk"), run_id=Subquery(latest_run))
        .order_by()
        .values("step__trajectory")
        .annotate(low=Min("value"))
        .values("low")
    )
    return {"list_min_credit": Subquery(lowest, output_field=FloatField())}


def _credit_cell(row: Trajectory) -> str:
    credit = getattr(row, "list_min_credit", None)
    return "—" if credit is None else f"{credit:.3f}"


trajectory_column_register(
    ListColumn(
        name="latest_credit",
        header="Min credit",
        annotations=_credit_annotations,
        cell=_credit_cell,
        numeric=True,
        help="the lowest step credit of the latest attribution run",
        shown=_shown,
        sort="list_min_credit",
    )
)
