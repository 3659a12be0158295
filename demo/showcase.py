"""What `make run` shows in a demo project without a command typed: a labeling queue with
items leased to the demo user, a trained head (trained on the project's own labels, then
scoring every step), a small process reward model in the shape of a real one (a tiny
randomly initialised step-tag LM, Math-Shepherd's shape, so its scores are noise), credit
from both kinds of attribution run, and one finished export of each main format. With
them the compare page has numbers and the failures page first errors.

Each stage starts when what it needs has finished; :func:`showcase_advance` starts
whatever is ready and says what is still pending. The ``demo.showcase_advance`` task runs
it on the worker until nothing is, so all of it happens after the web server is up, and
each run's progress shows in its own section of the project page.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User

from exports.models import ExportJob
from exports.services import export_request_build, export_start
from labeling.models import Queue
from labeling.services import queue_create, queue_item_take
from scoring.models import AttributionRun, Scorer, ScoringRun
from scoring.prm import STEP_TAG_LM, tiny
from scoring.services import (
    attribution_run_start,
    scorer_create,
    scorer_train_start,
    scoring_run_start,
)
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters

HEAD = "demo-head"
PRM = "demo-prm"
QUEUE = "Demo queue"
QUEUE_SIZE = 20
# Each main export format, with the label source it reads and, for rl, the credit run.
EXPORTS = ("trl-stepwise", "dpo", "rl")
ENDED = (ScoringRun.Status.DONE, ScoringRun.Status.FAILED, ScoringRun.Status.CANCELLED)


def showcase_queue(*, project: Project, user: User) -> Queue:
    """The demo queue, with its first item leased to ``user`` (at once: no worker)."""
    queue = Queue.objects.filter(project=project, name=QUEUE).first()
    if queue is None:
        queue = queue_create(
            project=project,
            name=QUEUE,
            created_by=user,
            filters=TrajectoryFilters(),
            limit=QUEUE_SIZE,
            description="The demo's first trajectories, to label from the keyboard.",
        )
    queue_item_take(queue=queue, annotator=user)
    return queue


def showcase_advance(*, project: Project, user: User, labels: str) -> list[str]:
    """Start every stage whose inputs are ready; return the stages still pending (empty
    once all has finished). ``labels`` is the label source the project's ground truth is
    under (the exports read it)."""
    pending: list[str] = []
    head = _head_scored(project, user)
    prm = _prm_scored(project, user)
    if head is None:
        pending.append("trained head")
    if prm is None:
        pending.append("process reward model")
    runs = _attribution(project, user, head) if head is not None else None
    if runs is None:
        pending.append("attribution")
    if runs is not None and not _exports(project, user, labels, runs):
        pending.append("exports")
    return pending


def _head_scored(project: Project, user: User) -> Scorer | None:
    """The trained head once it has scored the project's steps; trained first."""
    head = Scorer.objects.filter(project=project, name=HEAD).order_by("-id").first()
    if head is None:
        if not ScoringRun.objects.filter(project=project, kind=ScoringRun.Kind.TRAIN).exists():
            scorer_train_start(
                project=project, name=HEAD, user=user, score_after=True, queue="default"
            )
        return None
    return head if _scored(head) else None


def _prm_scored(project: Project, user: User) -> Scorer | None:
    prm = Scorer.objects.filter(project=project, name=PRM).first()
    if prm is None:
        path = Path(settings.MODELS_DIR) / "demo-prm"
        if not (path / "config.json").is_file():
            tiny.save_step_tag_lm(path)
        prm = scorer_create(
            project=project,
            name=PRM,
            kind=STEP_TAG_LM,
            model_ref=str(path),
            queue="default",
            user=user,
        )
    if not ScoringRun.objects.filter(scorer=prm, kind=ScoringRun.Kind.SCORE).exists():
        scoring_run_start(project=project, scorer=prm, user=user)
        return None
    return prm if _scored(prm) else None


def _scored(scorer: Scorer) -> bool:
    runs = ScoringRun.objects.filter(scorer=scorer, kind=ScoringRun.Kind.SCORE)
    return runs.exists() and not runs.exclude(status__in=ENDED).exists()


def _attribution(project: Project, user: User, head: Scorer) -> dict[str, AttributionRun] | None:
    """The credit runs, once finished: the head's value deltas, and the group-relative
    advantage of each rollout within its task."""
    runs = {}
    for method, scorer in (("prm-delta", head), ("group-relative", None)):
        run = AttributionRun.objects.filter(project=project, method=method).first()
        if run is None:
            run = attribution_run_start(project=project, method=method, scorer=scorer, user=user)
        runs[method] = run
    finished = all(
        run.status in ENDED
        for run in AttributionRun.objects.filter(pk__in=[run.pk for run in runs.values()])
    )
    return runs if finished else None


def _exports(project: Project, user: User, labels: str, runs: dict[str, AttributionRun]) -> bool:
    """One export of each main format, started once; True when all have ended."""
    for name in EXPORTS:
        if not ExportJob.objects.filter(project=project, format=name).exists():
            request = export_request_build(
                project=project,
                format=name,
                labels=labels,
                neutral="drop",
                credit_run=runs["prm-delta"].pk if name == "rl" else None,
            )
            export_start(project=project, user=user, request=request)
    jobs = ExportJob.objects.filter(project=project, format__in=EXPORTS)
    return not jobs.filter(status__in=ExportJob.ACTIVE).exists()
