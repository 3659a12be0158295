"""Rollouts through real Celery workers and a real (tiny, random) causal LM: the
``rollout`` command with ``--wait``, and a worker killed in the middle of a job."""

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

from rollouts.models import Continuation, Policy, RolloutBranch, RolloutChunk, RolloutJob
from rollouts.services import rollout_job_start
from tests.factories import trajectory_with_steps
from tests.rollouts.conftest import Workers
from tests.scoring.conftest import MODEL_MODULES
from tests.waiting import wait_until
from trajectories.models import Project, Trajectory

pytestmark = pytest.mark.celery


def last_json_line(output: str) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return summary


def test_rollout_command_runs_on_the_gpu_queue(
    transactional_db: None,
    celery_worker: object,
    project: Project,
    make_policy: Callable[..., Policy],
) -> None:
    for n in range(2):
        trajectory_with_steps(project, [f"{n} + 1 = {n + 1}", f"The answer is {n + 1}."])
    make_policy("tiny-policy", parameters={"chunk_continuations": 4})
    out = StringIO()
    call_command(
        "rollout",
        project="demo",
        policy="tiny-policy",
        k=3,
        steps="all",
        wait=True,
        timeout=120,
        stdout=out,
    )
    summary = last_json_line(out.getvalue())
    assert summary["status"] == "done", summary
    assert summary["total"] == summary["done"] == 12
    assert summary["tokens"] > 0 and summary["continuations_per_second"] > 0
    assert Trajectory.objects.filter(continuation__isnull=False).count() == 12


def test_a_killed_worker_loses_at_most_one_chunk(
    transactional_db: None, workers: Workers, project: Project, tmp_path: Path
) -> None:
    """SIGKILL the worker (and its pool child) while it generates a chunk; a second
    worker (started ahead, idle until the kill) finds the unacknowledged chunk again and
    the job completes with exactly k continuations per branch."""
    from scoring.prm import tiny

    slow = tiny.save_step_tag_lm(tmp_path / "slow-policy", layers=4, hidden=256)
    # Three chunks of eight: one done, one interrupted by the kill, one the second worker
    # finds.
    for n in range(3):
        trajectory_with_steps(project, [f"Step {i} of {n}: add the digits." for i in range(2)])
    queue = f"rollouts-kill-{uuid.uuid4().hex[:8]}"
    policy = Policy.objects.create(
        name="slow",
        model_ref=str(slow),
        queue=queue,
        parameters={
            "max_new_tokens": 40,
            "batch_size": 8,
            "chunk_continuations": 8,
            "max_length": 512,
            "temperature": 1.0,
        },
    )
    second = workers.spare(f"kill-b-{queue}", preload=MODEL_MODULES)
    first = workers.start(["default", queue], f"kill-a-{queue}", preload=MODEL_MODULES)
    job = rollout_job_start(project=project, policy=policy, k=4, mode=RolloutJob.Mode.ALL)

    def in_the_middle() -> bool:
        job.refresh_from_db()
        busy = RolloutChunk.objects.filter(
            job=job, status=RolloutChunk.Status.PENDING, attempts__gte=1
        )
        return job.chunks_done >= 1 and busy.exists()

    assert wait_until(in_the_middle, timeout=120), "the first worker never got going"
    workers.kill(first)
    job.refresh_from_db()
    assert job.status == RolloutJob.Status.RUNNING
    assert job.chunks_done < job.chunks_total
    interrupted = RolloutChunk.objects.filter(
        job=job, status=RolloutChunk.Status.PENDING, attempts__gte=1
    )
    assert interrupted.count() == 1
    lost = interrupted.get().continuations
    assert job.done == 8 * job.chunks_done  # what was written stays, nothing half-written
    assert lost <= 8

    workers.take_over(second, ["default", queue])

    def finished() -> bool:
        job.refresh_from_db()
        return not job.is_active

    assert wait_until(finished, timeout=180)
    assert job.status == RolloutJob.Status.DONE, job.error
    assert job.total == job.done == 6 * 4
    per_branch = RolloutBranch.objects.filter(job=job).annotate(n=Count("continuations"))
    assert {b.n for b in per_branch} == {4} and per_branch.count() == 6
    per_sample = Continuation.objects.values("branch", "sample").annotate(n=Count("pk"))
    assert {row["n"] for row in per_sample} == {1}
    assert Trajectory.objects.filter(continuation__branch__job=job).count() == 24
    # The chunk the first worker was generating ran again on the second.
    assert RolloutChunk.objects.filter(job=job, attempts__gte=2).exists()
