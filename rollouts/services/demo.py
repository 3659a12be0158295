"""The demo's policy and rollouts, behind `make run`: the policy is trained on a worker
once the web server is up (a few minutes on a CPU), registered as the global policy
``demo-policy``, and then two rollout jobs on a few of the demo project's tasks are
queued: Monte Carlo labels for every step, and a first-error search on the failures,
both compared with the generated ground truth when they finish."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from rollouts import demo_policy
from rollouts.models import DemoPolicyTraining, Policy, RolloutJob
from rollouts.services.jobs import rollout_job_start
from stepscope.jobs.lifecycle import job_fail
from stepscope.locks import LockClass, session_lock_try
from stepscope.queueing import broker_require
from trajectories import synthetic
from trajectories.models import Project

logger = logging.getLogger(__name__)

POLICY_NAME = demo_policy.POLICY_NAME
# Continuations per step; the demo's synthetic tasks are ``arith-<seed>-<n>``.
DEMO_K = 8
DEMO_SEED = 7
REPORT_NAME = "stepscope-demo-policy.json"
# Progress is written at most this often (in percent) while the policy trains.
PROGRESS_STEP = 2
# The training's wall-time cap on the worker: `make run` is to show the Monte Carlo values
# within ten minutes, and the training comes before them. The 1200 steps take about six
# minutes beside the rest of the showcase; on a busier machine the cap ends the run first
# and the schedule still lands (demo_policy.train), with a policy that slips more often.
TRAINING_MINUTES = 7.0


def demo_policy_dir() -> Path:
    return Path(settings.MODELS_DIR) / f"demo-policy-v{demo_policy.VERSION}"


def demo_policy_report() -> dict[str, Any] | None:
    """The training report of the trained demo policy; None until one is trained (the
    report is written last, so a half-saved model has none)."""
    report = demo_policy_dir() / REPORT_NAME
    if not report.is_file():
        return None
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def demo_policy_register() -> Policy:
    policy, _ = Policy.objects.update_or_create(
        name=POLICY_NAME,
        project=None,
        defaults={
            "model_ref": str(demo_policy_dir()),
            "parameters": demo_policy.PARAMETERS,
            "queue": "gpu",
        },
    )
    return policy


def demo_rollouts_queue(*, project: Project, user: User | None, tasks: int) -> list[RolloutJob]:
    """Queue the demo's two rollout jobs on the project's first ``tasks`` synthetic
    tasks with the trained demo policy, unless they were queued before."""
    policy = demo_policy_register()
    if RolloutJob.objects.filter(project=project, policy=policy).exists():
        return []
    trajectory_ids = list(
        project.trajectories.filter(
            task_key__in=[f"arith-{DEMO_SEED}-{n}" for n in range(tasks)],
            continuation__isnull=True,
        ).values_list("pk", flat=True)
    )
    return [
        rollout_job_start(
            project=project,
            policy=policy,
            k=DEMO_K,
            mode=mode,
            user=user,
            trajectory_ids=trajectory_ids,
            against=synthetic.TRUTH_ANNOTATOR,
        )
        for mode in (RolloutJob.Mode.ALL, RolloutJob.Mode.SEARCH)
    ]


def demo_policy_training_start(
    *, project: Project, user: User | None, tasks: int, max_steps: int = 1200
) -> DemoPolicyTraining:
    """Queue the demo policy's training on the ``gpu`` queue, then the project's
    rollouts. A training of the project that has not finished is queued again rather
    than started anew: the worker that had it may have been stopped with `make stop`
    (a task already running elsewhere is left to finish, see
    :func:`demo_policy_training_run`)."""
    from rollouts import tasks as rollout_tasks

    broker_require()
    with transaction.atomic():
        training = DemoPolicyTraining.objects.select_for_update().filter(project=project).first()
        if training is None:
            training = DemoPolicyTraining.objects.create(
                project=project, rollout_tasks=tasks, max_steps=max_steps, created_by=user
            )
        elif training.status == DemoPolicyTraining.Status.DONE:
            return training
        elif training.status == DemoPolicyTraining.Status.FAILED:
            training.status = DemoPolicyTraining.Status.QUEUED
            training.percent = 0
            training.save(update_fields=["status", "percent"])
        transaction.on_commit(
            lambda: rollout_tasks.train_demo_policy.apply_async(args=[training.pk], queue="gpu")
        )
    return training


def demo_policy_training_run(*, training_id: int) -> None:
    """On a worker: train the policy (unless a trained one is on disk), then queue the
    project's rollouts. A redelivered task trains again from the start."""
    training = DemoPolicyTraining.objects.filter(pk=training_id).first()
    if training is None or training.status == DemoPolicyTraining.Status.DONE:
        return  # gone with its project, or trained by an earlier delivery
    # Held for the task's whole life by this worker's session: a second delivery of the
    # task (queued again by a second `make run`) leaves the training to the first while
    # it lives, and takes it over when that worker is gone.
    with session_lock_try(LockClass.DEMO_TRAINING, training.pk) as taken:
        if taken:
            _train(training)


def _train(training: DemoPolicyTraining) -> None:
    DemoPolicyTraining.objects.filter(pk=training.pk).update(
        status=DemoPolicyTraining.Status.RUNNING, percent=0, started_at=timezone.now(), error=""
    )
    try:
        if demo_policy_report() is None:
            shown = [0]

            def progress(done: float) -> None:
                percent = min(99, int(100 * done))
                if percent >= shown[0] + PROGRESS_STEP:
                    shown[0] = percent
                    DemoPolicyTraining.objects.filter(pk=training.pk).update(percent=percent)
                    logger.info("demo policy training %s: %s%%", training.pk, percent)

            logger.info("demo policy training %s: started", training.pk)
            demo_policy.train(
                demo_policy_dir(),
                minutes=TRAINING_MINUTES,
                max_steps=training.max_steps,
                progress=progress,
            )
        jobs = demo_rollouts_queue(
            project=training.project, user=training.created_by, tasks=training.rollout_tasks
        )
        logger.info("demo policy training %s: trained; rollout jobs %s", training.pk, jobs)
    except Exception as error:
        job_fail(DemoPolicyTraining, pk=training.pk, error=error)
        raise
    DemoPolicyTraining.objects.filter(pk=training.pk).update(
        status=DemoPolicyTraining.Status.DONE, percent=100, finished_at=timezone.now()
    )
