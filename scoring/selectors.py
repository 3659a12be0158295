"""Named read queries for scoring. Lookups that start from a request go through a
``*_for_user`` helper, which raises 404 outside the user's projects."""

from __future__ import annotations

from django.db.models import Exists, F, FloatField, OuterRef, Q, QuerySet
from django.db.models.functions import Abs
from django.http import Http404

from labeling.models import StepLabel
from scoring import prm
from scoring.evidence import (  # noqa: F401  (the page's evidence, named here too)
    AgentCredit,
    RunChoice,
    ScorerChoice,
    StepEvidence,
    StripCell,
    TrajectoryEvidence,
    trajectory_evidence,
)
from scoring.models import (
    AttributionRun,
    EvidenceChoice,
    Scorer,
    ScoringRun,
    StepScore,
)
from trajectories.models import Project, Step, Trajectory
from trajectories.selectors import AnyUser, projects_for_user

RECENT_RUNS = 10


def scorers_for_project(project: Project) -> QuerySet[Scorer]:
    """Scorers a project may use: its own and the global ones."""
    return Scorer.objects.filter(Q(project=project) | Q(project__isnull=True))


def scorers_for_user(user: AnyUser) -> QuerySet[Scorer]:
    return Scorer.objects.filter(Q(project__in=projects_for_user(user)) | Q(project__isnull=True))


def scorer_get_for_user(user: AnyUser, pk: int) -> Scorer:
    scorer = scorers_for_user(user).filter(pk=pk).first() if user.is_authenticated else None
    if scorer is None:
        raise Http404("No such scorer.")
    return scorer


def scorer_latest(project: Project, name: str) -> Scorer | None:
    """The newest revision of ``name``; the project's own scorer wins over a global one."""
    return (
        scorers_for_project(project)
        .filter(name=name)
        .order_by(F("project_id").desc(nulls_last=True), "-id")
        .first()
    )


def scorer_id_for(project: Project, name: str) -> int:
    """The newest scorer called ``name`` usable in ``project`` (its own, or global)."""
    scorer = (
        Scorer.objects.filter(Q(project=project) | Q(project__isnull=True), name=name)
        .order_by("-id")
        .first()
    )
    if scorer is None:
        raise ValueError(f"no scorer named {name!r} in project {project.slug!r}")
    return scorer.pk


def scorer_choices(project: Project) -> list[Scorer]:
    """The newest revision of each scorer name the project may run (not external ones)."""
    seen: dict[str, Scorer] = {}
    queryset = (
        scorers_for_project(project)
        .exclude(kind=prm.EXTERNAL)
        .exclude(kind=prm.TRAINED_HEAD, artifact__isnull=True)
        .order_by("name", F("project_id").desc(nulls_last=True), "-id")
    )
    for scorer in queryset:
        seen.setdefault(scorer.name, scorer)
    return list(seen.values())


def scorers_with_scores(project: Project) -> list[Scorer]:
    """The newest revision of each scorer name the project may use, external ones (scores
    imported from elsewhere) included: the inputs attribution can read."""
    seen: dict[str, Scorer] = {}
    queryset = (
        scorers_for_project(project)
        .exclude(kind=prm.TRAINED_HEAD, artifact__isnull=True)
        .defer("artifact")
        .order_by("name", F("project_id").desc(nulls_last=True), "-id")
    )
    for scorer in queryset:
        seen.setdefault(scorer.name, scorer)
    return list(seen.values())


def scoring_runs_recent(project: Project, limit: int = RECENT_RUNS) -> list[ScoringRun]:
    return list(
        ScoringRun.objects.filter(project=project).select_related("scorer").order_by("-id")[:limit]
    )


def scoring_run_get_for_user(user: AnyUser, pk: int) -> ScoringRun:
    run = (
        ScoringRun.objects.select_related("project", "scorer")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if run is None:
        raise Http404("No such scoring run.")
    return run


def default_scorer(project: Project) -> Scorer | None:
    """The scorer whose scores the project last finished: the one to show by default."""
    run = (
        ScoringRun.objects.filter(
            project=project,
            status=ScoringRun.Status.DONE,
            kind__in=[ScoringRun.Kind.SCORE, ScoringRun.Kind.IMPORT],
        )
        .select_related("scorer")
        .order_by("-finished_at", "-id")
        .first()
    )
    return run.scorer if run else None


def step_scores_for_trajectory(
    trajectory: Trajectory, scorer: Scorer | None = None
) -> dict[int, float]:
    """Step id → score for one trajectory, from ``scorer`` or the project's default
    scorer; empty when there is none. One query."""
    scorer = scorer or default_scorer(trajectory.project)
    if scorer is None:
        return {}
    return dict(
        StepScore.objects.filter(step__trajectory=trajectory, scorer=scorer).values_list(
            "step_id", "value"
        )
    )


def latest_trained_head(project: Project) -> Scorer | None:
    return (
        Scorer.objects.filter(project=project, kind=prm.TRAINED_HEAD)
        .exclude(artifact__isnull=True)
        .order_by("-id")
        .first()
    )


def steps_most_uncertain(project: Project, scorer: Scorer | None = None) -> QuerySet[Step]:
    """Unlabeled labelable steps that have a score, most uncertain first (score closest
    to 0.5), from ``scorer`` or the latest trained head: the steps whose labels teach the
    head most. For a labeling queue's "most uncertain first" order."""
    scorer = scorer or latest_trained_head(project)
    if scorer is None:
        return Step.objects.none()
    score = StepScore.objects.filter(step=OuterRef("pk"), scorer=scorer).values("value")[:1]
    return (
        Step.objects.filter(trajectory__project=project, labelable=True)
        .exclude(Exists(StepLabel.objects.filter(step=OuterRef("pk"))))
        .annotate(score=score)
        .filter(score__isnull=False)
        .annotate(uncertainty=Abs(F("score") - 0.5, output_field=FloatField()))
        .order_by("uncertainty", "trajectory_id", "index")
    )


# --- Attribution ---------------------------------------------------------------------------


def attribution_runs_recent(project: Project, limit: int = RECENT_RUNS) -> list[AttributionRun]:
    """Runs over trajectories; token saliency of single steps shows on their steps."""
    return list(
        AttributionRun.objects.filter(project=project)
        .exclude(method=AttributionRun.Method.TOKEN_SALIENCY)
        .select_related("scorer")
        .order_by("-created_at", "-id")[:limit]
    )


def attribution_run_get_for_user(user: AnyUser, pk: int) -> AttributionRun:
    run = (
        AttributionRun.objects.select_related("project", "scorer")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if run is None:
        raise Http404("No such attribution run.")
    return run


def saliency_latest(step: Step, scorer: Scorer) -> AttributionRun | None:
    """The newest token-saliency run of ``step`` with ``scorer``."""
    return (
        AttributionRun.objects.filter(
            project_id=step.trajectory.project_id,
            method=AttributionRun.Method.TOKEN_SALIENCY,
            scorer=scorer,
            selection__step=step.pk,
        )
        .order_by("-id")
        .first()
    )


def evidence_choice_resolve(
    user_id: int, project: Project, *, scorer_id: int | None, run_id: int | None
) -> tuple[Scorer | None, int | None]:
    """The scorer (None: the project's default) and the attribution run (None: the
    newest) a trajectory page of ``project`` shows to the user: those the page's address
    asks for, else those the user last picked in the project (``EvidenceChoice``). A
    scorer the project may not use counts as not asked for."""
    saved = EvidenceChoice.objects.filter(user_id=user_id, project=project).first()
    wanted = scorer_id if scorer_id is not None else (saved.scorer_id if saved else None)
    scorer = scorers_for_project(project).filter(pk=wanted).first() if wanted else None
    if run_id is None and saved is not None:
        run_id = saved.credit_run_id
    return scorer, run_id
