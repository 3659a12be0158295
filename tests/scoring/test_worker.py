"""Scoring through real Celery workers: the ``score`` and ``train_scorer`` commands with
``--wait``, and a worker killed in the middle of a run."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Count

from scoring import prm
from scoring.models import Scorer, ScoringChunk, ScoringRun, StepScore
from scoring.services import scoring_run_start
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import MODEL_MODULES, TinyModels, Workers
from tests.waiting import wait_until
from trajectories.models import Project, Step
from trajectories.services import imported_annotator

pytestmark = pytest.mark.celery


def last_json_line(output: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return summary


def test_score_command_runs_on_the_gpu_queue(
    transactional_db: None,
    celery_worker: object,
    project: Project,
    make_scorer: Callable[..., Scorer],
) -> None:
    for n in range(4):
        trajectory_with_steps(project, [f"{n} + {i} = {n + i}" for i in range(3)])
    make_scorer(name="tiny-prm", parameters={"chunk_steps": 5})
    out = StringIO()
    call_command("score", project="demo", scorer="tiny-prm", wait=True, timeout=120, stdout=out)
    summary = last_json_line(out.getvalue())
    assert summary["status"] == "done", summary
    assert summary["total"] == summary["done"] == 12
    assert StepScore.objects.filter(scorer__name="tiny-prm").count() == 12


def test_a_killed_worker_loses_nothing_and_duplicates_nothing(
    transactional_db: None, workers: Workers, project: Project, slow_token_classifier: Path
) -> None:
    """SIGKILL the worker (and its pool child) while it scores a chunk; a second worker
    (started ahead, idle on a queue of its own until the kill) finds the unacknowledged
    chunk again and the run completes with one score per step."""
    text = "Multiply the two numbers, then subtract the remainder and carry the digit. " * 3
    # Three chunks of 16 steps (a few seconds each): one done, one interrupted by the
    # kill, one the second worker finds queued besides the interrupted one.
    for n in range(12):
        trajectory_with_steps(project, [f"{text} Step {i} of {n}." for i in range(4)])
    queue = f"scoring-kill-{uuid.uuid4().hex[:8]}"
    scorer = Scorer.objects.create(
        name="slow",
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref=str(slow_token_classifier),
        queue=queue,
        parameters={"chunk_steps": 16, "batch_size": 4},
    )
    second = workers.spare(f"kill-b-{queue}", preload=MODEL_MODULES)
    first = workers.start(["default", queue], f"kill-a-{queue}", preload=MODEL_MODULES)
    run = scoring_run_start(project=project, scorer=scorer)

    def in_the_middle() -> bool:
        run.refresh_from_db()
        busy = ScoringChunk.objects.filter(
            run=run, status=ScoringChunk.Status.PENDING, attempts__gte=1
        )
        return run.chunks_done >= 1 and busy.exists()

    assert wait_until(in_the_middle, timeout=120), "the first worker never got going"
    workers.kill(first)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.RUNNING
    assert run.chunks_done < run.chunks_total
    interrupted = ScoringChunk.objects.filter(
        run=run, status=ScoringChunk.Status.PENDING, attempts__gte=1
    ).count()
    assert interrupted == 1

    workers.take_over(second, ["default", queue])

    def finished() -> bool:
        run.refresh_from_db()
        return not run.is_active

    assert wait_until(finished, timeout=120)
    assert run.status == ScoringRun.Status.DONE, run.error
    labelable = Step.objects.filter(trajectory__project=project, labelable=True)
    assert run.total == run.done == labelable.count() == 48
    per_step = StepScore.objects.filter(scorer=scorer).values("step").annotate(n=Count("id"))
    assert len(per_step) == 48 and {row["n"] for row in per_step} == {1}
    # The chunk the first worker was scoring ran again on the second.
    assert ScoringChunk.objects.filter(run=run, attempts__gte=2).exists()
    assert not ScoringChunk.objects.filter(run=run, status=ScoringChunk.Status.PENDING).exists()


def test_train_scorer_command_trains_a_new_revision_on_a_worker(
    transactional_db: None, celery_worker: object, project: Project, tiny_models: TinyModels
) -> None:
    schema = project.label_schemas.get()
    annotator = imported_annotator("tests")
    labels = []
    for n in range(40):
        good = n % 3 != 0
        content = "right: 2 + 2 = 4" if good else "wrong wrong: 2 + 2 = 5"
        trajectory = trajectory_with_steps(project, [content], task_key=f"task-{n}")
        labels.append((trajectory.steps.get(), 1 if good else -1))
    from labeling.models import StepLabel

    StepLabel.objects.bulk_create(
        StepLabel(step=step, annotator=annotator, schema=schema, value=value)
        for step, value in labels
    )
    arguments = {
        "project": "demo",
        "name": "head",
        "encoder": str(tiny_models.encoder),
        "params": json.dumps({"max_length": 32}),
        "holdout": 0.3,
        "wait": True,
        "timeout": 120,
    }
    out = StringIO()
    call_command("train_scorer", score=True, stdout=out, **arguments)
    summary = last_json_line(out.getvalue())
    assert summary["status"] == "done", summary
    assert summary["revision"] == "1"
    assert isinstance(summary["auroc"], float) and summary["auroc"] > 0.9
    assert summary["train_steps"] + summary["heldout_steps"] == 40
    head = Scorer.objects.get(pk=summary["scorer_id"])
    assert head.kind == prm.TRAINED_HEAD
    assert head.artifact is not None and head.artifact["metrics"]["auroc"] > 0.9
    # --score: the new revision then scored the project.
    scoring = ScoringRun.objects.filter(scorer=head, kind=ScoringRun.Kind.SCORE)
    assert wait_until(lambda: scoring.filter(status="done").exists(), timeout=60)
    assert StepScore.objects.filter(scorer=head).count() == 40

    out = StringIO()
    call_command("train_scorer", stdout=out, **arguments)
    assert last_json_line(out.getvalue())["revision"] == "2"
