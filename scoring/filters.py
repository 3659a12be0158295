"""The trajectory filter on an attribution run's credits (``TrajectoryFilters``'
credit_run, credit_above and credit_below), registered with trajectories' selector by
``ScoringConfig.ready()``: it reads scoring's tables, which trajectories may not."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q

from scoring.models import AttributionRun, StepCredit
from trajectories.models import Project
from trajectories.selection import SelectionError, TrajectoryFilters
from trajectories.selectors import trajectory_filter_register


@trajectory_filter_register("credit")
def credit_condition(project: Project, filters: TrajectoryFilters) -> Q | None:
    if filters.credit_run is None:
        return None
    if not AttributionRun.objects.filter(project=project, pk=filters.credit_run).exists():
        message = f"no attribution run {filters.credit_run} in project {project.slug!r}"
        raise SelectionError({"credit_run": message})
    credits = StepCredit.objects.filter(run_id=filters.credit_run, step__trajectory=OuterRef("pk"))
    condition = Q(Exists(credits))
    if filters.credit_above is not None:
        condition &= Q(Exists(credits.filter(value__gt=filters.credit_above)))
    if filters.credit_below is not None:
        condition &= Q(Exists(credits.filter(value__lt=filters.credit_below)))
    return condition
