"""The trained head: fitted on a worker to a project's submitted step labels (the tasks
outside a holdout; measured on the rest) and stored as the next revision of one scorer
name. torch is imported lazily, inside the functions that run on workers."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Avg
from django.utils import timezone

from scoring import prm
from scoring.models import Scorer, ScoringRun
from scoring.services.scores import ScoringError, scorer_check, scoring_run_fail, scoring_run_start
from stepscope.jobs.retry import TRANSIENT_ERRORS
from stepscope.queueing import broker_require
from trajectories.models import Project, Step, Trajectory

NEUTRAL_CHOICES = ("skip", "good", "bad")


def scorer_train_start(
    *,
    project: Project,
    name: str,
    user: User | None = None,
    encoder: str = prm.DEFAULT_ENCODER,
    parameters: dict[str, Any] | None = None,
    neutral: str = "skip",
    holdout: float = 0.2,
    queue: str = "gpu",
    score_after: bool = False,
) -> ScoringRun:
    """Train a new revision of the head ``name`` on the project's labels, on a worker.
    With ``score_after``, the new revision then scores the project's steps."""
    parameters = dict(parameters or {})
    scorer_check(kind=prm.TRAINED_HEAD, model_ref=encoder, parameters=parameters, queue=queue)
    if neutral not in NEUTRAL_CHOICES:
        raise ScoringError(f"neutral labels count as one of {', '.join(NEUTRAL_CHOICES)}")
    if not 0 < holdout < 1:
        raise ScoringError("the held-out fraction must be between 0 and 1")
    existing = Scorer.objects.filter(project=project, name=name).exclude(kind=prm.TRAINED_HEAD)
    if existing.exists():
        raise ScoringError(f"{name!r} is a scorer of another kind in this project")
    broker_require()  # a dead broker is said now; no job is left queued
    with transaction.atomic():
        run = ScoringRun.objects.create(
            project=project,
            kind=ScoringRun.Kind.TRAIN,
            parameters={
                "name": name,
                "encoder": encoder,
                "parameters": parameters,
                "neutral": neutral,
                "holdout": holdout,
                "queue": queue,
                "score_after": score_after,
            },
            created_by=user,
        )
        from scoring import tasks

        transaction.on_commit(lambda: tasks.train_head.apply_async(args=[run.pk], queue=queue))
    return run


def _labeled_trajectories(project: Project, neutral: str) -> list[Any]:
    """Each trajectory with submitted step labels, cut after its last labeled step.
    Several annotators' labels on a step are averaged; 0 is neutral."""
    from labeling.models import StepLabel
    from scoring.prm.head import LabeledTrajectory

    means = (
        StepLabel.objects.filter(
            step__trajectory__project=project,
            status=StepLabel.Status.SUBMITTED,
            schema__kind__in=["ternary", "binary"],
        )
        .values("step_id", "step__trajectory_id")
        .annotate(mean=Avg("value"))
    )
    labels: dict[int, dict[int, bool]] = {}
    labeled_steps: dict[int, set[int]] = {}
    for row in means.iterator(chunk_size=10_000):
        trajectory_id, step_id, mean = row["step__trajectory_id"], row["step_id"], row["mean"]
        labeled_steps.setdefault(trajectory_id, set()).add(step_id)
        if mean > 0 or (mean == 0 and neutral == "good"):
            labels.setdefault(trajectory_id, {})[step_id] = True
        elif mean < 0 or (mean == 0 and neutral == "bad"):
            labels.setdefault(trajectory_id, {})[step_id] = False
    trajectories = Trajectory.objects.filter(pk__in=list(labels)).values_list(
        "pk", "task", "task_key"
    )
    info = {pk: (task, task_key or f"trajectory-{pk}") for pk, task, task_key in trajectories}
    steps: dict[int, list[tuple[int, str, str, bool]]] = {}
    rows = (
        Step.objects.filter(trajectory_id__in=list(labels))
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "pk", "role", "content", "labelable")
    )
    for trajectory_id, pk, role, content, labelable in rows.iterator(chunk_size=5000):
        steps.setdefault(trajectory_id, []).append((pk, role, content, labelable))
    out = []
    for trajectory_id, step_labels in labels.items():
        items = steps.get(trajectory_id, [])
        last = max(i for i, (pk, *_rest) in enumerate(items) if pk in step_labels)
        complete = all(pk in labeled_steps[trajectory_id] for pk, _, _, lab in items if lab)
        task, group = info[trajectory_id]
        out.append(
            LabeledTrajectory(
                trajectory=prm.TrajectoryInput(
                    trajectory_id,
                    task,
                    tuple(
                        prm.StepInput(pk, content, role, labelable=lab, score=False)
                        for pk, role, content, lab in items[: last + 1]
                    ),
                ),
                group=group,
                labels=step_labels,
                complete=complete,
            )
        )
    return out


def scorer_train_run(*, run_id: int) -> ScoringRun:
    """Train on a worker: embed the labeled steps, fit the head on the tasks outside the
    holdout, measure it on the held-out tasks, and store it as the next revision."""
    from scoring.prm.head import train_head

    with transaction.atomic():
        run = ScoringRun.objects.select_for_update().get(pk=run_id)
        if run.status not in ScoringRun.ACTIVE or run.scorer_id is not None:
            return run
        run.status = ScoringRun.Status.RUNNING
        run.started_at = run.started_at or timezone.now()
        run.save(update_fields=["status", "started_at"])
    settings = run.parameters
    spec = prm.ScorerSpec(
        kind=prm.TRAINED_HEAD,
        model_ref=settings["encoder"],
        params=prm.params_for_kind(prm.TRAINED_HEAD, settings["parameters"]),
    )
    try:
        labeled = _labeled_trajectories(run.project, settings["neutral"])
        result = train_head(labeled, spec=spec, holdout=settings["holdout"])
    except TRANSIENT_ERRORS:
        raise
    except Exception as error:
        scoring_run_fail(run_id=run.pk, error=error)
        raise
    with transaction.atomic():
        run = ScoringRun.objects.select_for_update().get(pk=run_id)
        if run.status != ScoringRun.Status.RUNNING:
            return run
        revision = _next_revision(run.project, settings["name"])
        scorer = Scorer.objects.create(
            project=run.project,
            name=settings["name"],
            kind=prm.TRAINED_HEAD,
            model_ref=settings["encoder"],
            revision=revision,
            parameters=settings["parameters"],
            queue=settings["queue"],
            artifact={
                "head": result.head.to_dict(),
                "metrics": result.metrics,
                "training_run": run.pk,
            },
            created_by=run.created_by,
        )
        steps = result.metrics["train_steps"] + result.metrics["heldout_steps"]
        run.scorer = scorer
        run.metrics = result.metrics
        run.total = run.done = steps
        run.status = ScoringRun.Status.DONE
        run.finished_at = timezone.now()
        seconds = (run.finished_at - run.started_at).total_seconds() if run.started_at else 0
        run.steps_per_second = steps / seconds if seconds > 0 else None
        run.save()
        if settings.get("score_after"):
            scoring_run_start(project=run.project, scorer=scorer, user=run.created_by)
    return run


def _next_revision(project: Project, name: str) -> str:
    revisions = Scorer.objects.filter(project=project, name=name).values_list("revision", flat=True)
    numbers = [int(r) for r in revisions if r.isdigit()]
    return str(max(numbers, default=0) + 1)
