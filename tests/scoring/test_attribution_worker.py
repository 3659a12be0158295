"""Attribution through real Celery workers: the ``attribute`` command with ``--wait`` for a
CPU method on ``default`` and the model methods on the scorer's queue with a tiny model
(leave-one-out, Shapley with its efficiency reported, token saliency with integrated
gradients' completeness), and a worker killed in the middle of a model run."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Count

from scoring import prm
from scoring.models import AttributionChunk, AttributionRun, Scorer, StepCredit
from scoring.services import attribution_run_start
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import MODEL_MODULES, Workers
from tests.scoring.test_worker import last_json_line, wait_until
from trajectories.models import Project, Step

pytestmark = pytest.mark.celery


def attribute(**options: Any) -> dict[str, Any]:
    out = StringIO()
    call_command("attribute", project="demo", wait=True, timeout=180, stdout=out, **options)
    return last_json_line(out.getvalue())


@pytest.fixture(scope="module")
def model_queue(django_db_setup: None) -> Iterator[tuple[Workers, str]]:
    """One worker for the runs of this module that finish (not the killed one): on
    ``default`` and a queue of its own, so a run only finishes if its model chunks really
    went to the scorer's queue. Started once, with the modules the model methods use
    imported, instead of once a test."""
    from django.db import connection

    queue = f"attr-model-{uuid.uuid4().hex[:8]}"
    started = Workers(connection.settings_dict["NAME"])
    try:
        started.start(["default", queue], queue, preload=(*MODEL_MODULES, "captum.attr"))
        yield started, queue
    finally:
        started.stop_all()


@pytest.fixture
def model_worker(transactional_db: None, model_queue: tuple[Workers, str]) -> Iterator[str]:
    """The module's worker for one test; before the test's rows are deleted, it is done
    with every task the test gave it (a task still running would find its rows gone)."""
    started, queue = model_queue
    yield queue
    assert wait_until(lambda: started.idle(started.started[0]), 60)


def test_cpu_method_on_the_default_queue(
    transactional_db: None, model_worker: str, project: Project
) -> None:
    for n, success in enumerate([True, False, True]):
        trajectory_with_steps(project, ["x", "y", f"z{n}"], task_key="t", success=success)
    summary = attribute(method="mc-prefix")
    assert summary["status"] == "done", summary
    assert summary["total"] == summary["done"] == 9
    assert {"read_s", "math_s", "write_s"} <= set(summary["metrics"])
    assert StepCredit.objects.filter(run_id=summary["run"]).count() == 9
    again = attribute(method="mc-prefix")
    assert again["run"] == summary["run"] and StepCredit.objects.count() == 9


def test_leave_one_out_and_shapley_run_on_the_scorers_queue(
    transactional_db: None,
    model_worker: str,
    project: Project,
    make_scorer: Callable[..., Scorer],
) -> None:
    for n in range(3):
        trajectory_with_steps(project, [f"{n} + {i} = {n + i}" for i in range(4)])
    make_scorer(
        name="tiny", queue=model_worker, parameters={"chunk_steps": 40}
    )  # 5 players a chunk
    loo = attribute(method="leave-one-out", scorer="tiny")
    assert loo["status"] == "done", loo
    assert loo["total"] == loo["done"] == 12
    assert AttributionChunk.objects.filter(run_id=loo["run"]).count() == 2
    assert StepCredit.objects.filter(run_id=loo["run"]).count() == 12

    shapley = attribute(method="shapley", scorer="tiny", param=["permutations=3", "seed=1"])
    assert shapley["status"] == "done", shapley
    metrics = shapley["metrics"]
    assert metrics["over_steps"] == 3 and metrics["exact_trajectories"] == 0
    # Efficiency, reported: the values of each trajectory add up to v(all) - v(none).
    assert metrics["efficiency_gap_max"] < 1e-9
    assert metrics["mean_std_error"] >= 0


def test_token_saliency_of_one_step_on_a_worker(
    transactional_db: None,
    model_worker: str,
    project: Project,
    make_scorer: Callable[..., Scorer],
) -> None:
    trajectory = trajectory_with_steps(
        project, ["Janet has 16 eggs and eats 3.", "So 16 - 3 = 13 eggs remain."]
    )
    make_scorer(name="tiny", queue=model_worker)
    step = trajectory.steps.get(index=1)
    summary = attribute(method="token-saliency", scorer="tiny", step=step.pk, param=["n_steps=256"])
    assert summary["status"] == "done", summary
    metrics = AttributionRun.objects.get(pk=summary["run"]).metrics
    assert "".join(t["text"] for t in metrics["tokens"]) == step.content
    # Completeness of integrated gradients: the token credits add up to the difference
    # between the step's score and its score with the step blanked.
    difference = metrics["score"] - metrics["baseline_score"]
    assert abs(metrics["sum"] - difference) < 1e-3
    assert abs(metrics["delta"]) < 1e-3


def test_a_killed_worker_loses_nothing_and_duplicates_nothing(
    transactional_db: None, workers: Workers, project: Project, slow_token_classifier: Path
) -> None:
    text = "Multiply the two numbers, then subtract the remainder and carry the digit. " * 3
    # Three chunks: one done, one interrupted by the kill, one the second worker finds
    # queued besides the interrupted one.
    for n in range(3):
        trajectory_with_steps(project, [f"{text} Step {i} of {n}." for i in range(4)])
    queue = f"attr-kill-{uuid.uuid4().hex[:8]}"
    scorer = Scorer.objects.create(
        name="slow",
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref=str(slow_token_classifier),
        queue=queue,
        parameters={"chunk_steps": 32, "batch_size": 4},  # 4 players, one trajectory a chunk
    )
    second = workers.spare(f"attr-kill-b-{queue}", preload=MODEL_MODULES)
    first = workers.start(["default", queue], f"attr-kill-a-{queue}", preload=MODEL_MODULES)
    run = attribution_run_start(project=project, method="leave-one-out", scorer=scorer)

    def in_the_middle() -> bool:
        run.refresh_from_db()
        busy = AttributionChunk.objects.filter(
            run=run, status=AttributionChunk.Status.PENDING, attempts__gte=1
        )
        return run.chunks_done >= 1 and busy.exists()

    assert wait_until(in_the_middle, timeout=120), "the first worker never got going"
    workers.kill(first)
    run.refresh_from_db()
    assert run.status == AttributionRun.Status.RUNNING
    assert run.chunks_done < run.chunks_total

    workers.take_over(second, ["default", queue])

    def finished() -> bool:
        run.refresh_from_db()
        return not run.is_active

    assert wait_until(finished, timeout=180)
    assert run.status == AttributionRun.Status.DONE, run.error
    labelable = Step.objects.filter(trajectory__project=project, labelable=True)
    assert run.total == run.done == labelable.count() == 12
    per_step = StepCredit.objects.filter(run=run).values("step").annotate(n=Count("id"))
    assert len(per_step) == 12 and {row["n"] for row in per_step} == {1}
    assert AttributionChunk.objects.filter(run=run, attempts__gte=2).exists()
