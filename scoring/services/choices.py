"""What a user picked to see beside a trajectory's steps: a scorer's scores and an
attribution run's credits, remembered per user and project."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from scoring.models import AttributionRun, EvidenceChoice, Scorer
from scoring.selectors import scorers_for_project
from trajectories.models import Project


@transaction.atomic
def evidence_choice_save(
    *, user: User, project: Project, scorer_id: int | None, run_id: int | None
) -> EvidenceChoice:
    """Remember the user's pick in ``project``; a scorer or run of another project (or
    none that exists) is refused with ValueError, naming it."""
    scorer: Scorer | None = None
    if scorer_id is not None:
        scorer = scorers_for_project(project).filter(pk=scorer_id).first()
        if scorer is None:
            raise ValueError(f"no scorer {scorer_id} in project {project.slug!r}")
    run: AttributionRun | None = None
    if run_id is not None:
        run = AttributionRun.objects.filter(project=project, pk=run_id).first()
        if run is None:
            raise ValueError(f"no attribution run {run_id} in project {project.slug!r}")
    choice, _ = EvidenceChoice.objects.update_or_create(
        user=user, project=project, defaults={"scorer": scorer, "credit_run": run}
    )
    return choice
