"""Judge runs through real Celery workers: the ``score`` command on a local judge, and a
worker killed while a remote judge's chunk is half asked."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from scoring import services
from scoring.models import (
    FailureVerdict,
    JudgeReply,
    Scorer,
    ScoringChunk,
    ScoringRun,
    StepScore,
)
from scoring.services import scoring_run_start
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import JUDGE_KEY_ENV, JUDGE_NAME, OpenAIServer, Workers
from tests.scoring.test_judges import LETTERS
from tests.waiting import wait_until
from tests.worker_forks import ForkedProcess
from trajectories.models import Project

pytestmark = pytest.mark.celery


def test_the_score_command_runs_a_judge_with_a_prompt_version(
    transactional_db: None, celery_worker: object, project: Project, tiny_judge: Path
) -> None:
    for n in range(2):
        trajectory_with_steps(project, [f"{n} + {i} = {n + i}" for i in range(3)])
    scorer = services.judge_create(
        name="judge",
        model_ref=str(tiny_judge),
        project=project,
        parameters={"max_tokens": 12, "verdict_pattern": "([a-z])", "verdict_values": LETTERS},
    )
    services.judge_prompt_create(scorer=scorer, template="Step: {step}\n\\boxed{{+1}} or not?")
    out = StringIO()
    call_command(
        "score",
        project="demo",
        scorer="judge",
        prompt_version=1,
        wait=True,
        timeout=120,
        stdout=out,
    )
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    assert summary["status"] == "done", summary
    assert summary["judge"]["prompt_version"] == 1 and summary["judge"]["calls"] == 6
    assert StepScore.objects.filter(scorer=scorer).count() == 6
    assert set(JudgeReply.objects.values_list("prompt__version", flat=True)) == {1}


def remote_judge(
    project: Project, server: OpenAIServer, name: str, queue: str, **parameters: str
) -> Scorer:
    return services.judge_create(
        name=name,
        model_ref=JUDGE_NAME,
        project=project,
        queue=queue,
        parameters={
            "backend": "remote",
            "base_url": server.base_url,
            "api_key_env": JUDGE_KEY_ENV,
            "max_tokens": 8,
            "concurrency": 2,
            "chunk_steps": 40,
            **parameters,
        },
    )


def killed_mid_run(
    workers: Workers, project: Project, scorer: Scorer, queue: str
) -> tuple[ScoringRun, set[str], ForkedProcess]:
    """A run of ``scorer`` (40 steps in one chunk) whose worker was killed once 10 replies
    were stored, the keys of the replies stored by then, and a second worker, started
    ahead and idle until ``resumed`` hands it the run's queue."""
    second = workers.spare(f"{queue}-b")
    first = workers.start(["default", queue], f"{queue}-a")
    run = scoring_run_start(project=project, scorer=scorer)
    assert wait_until(lambda: JudgeReply.objects.filter(run=run).count() >= 10, timeout=120)
    workers.kill(first)
    stored = set(JudgeReply.objects.filter(run=run).values_list("key", flat=True))
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.RUNNING and run.done == 0 and 10 <= len(stored) < 40
    return run, stored, second


def resumed(workers: Workers, second: ForkedProcess, run: ScoringRun, queue: str) -> None:
    """Have the second worker take the run's queue and wait until the run is done."""
    workers.take_over(second, ["default", queue])

    def finished() -> bool:
        run.refresh_from_db()
        return not run.is_active

    assert wait_until(finished, timeout=120)
    assert run.status == ScoringRun.Status.DONE, run.error


def asked_twice(server: OpenAIServer) -> int:
    """How many prompts the endpoint was asked more than once."""
    return sum(n - 1 for n in Counter(server.stats()["asked"]).values())


def test_a_killed_worker_re_asks_only_what_had_no_reply(
    transactional_db: None, workers: Workers, project: Project, openai_server: OpenAIServer
) -> None:
    for n in range(8):
        trajectory_with_steps(project, [f"step {i} of {n}" for i in range(5)])
    openai_server.control(delay=0.1, fixed_reply="Fine. \\boxed{+1}")
    queue = f"judge-kill-{uuid.uuid4().hex[:8]}"
    scorer = remote_judge(project, openai_server, "remote", queue)
    run, stored, second = killed_mid_run(workers, project, scorer, queue)
    asked_before = openai_server.stats()["requests"]

    resumed(workers, second, run, queue)
    assert run.done == 40 and StepScore.objects.filter(scorer=scorer).count() == 40
    assert JudgeReply.objects.filter(run=run).count() == 40
    # The second worker asked the endpoint only for the steps with no stored reply.
    assert openai_server.stats()["requests"] - asked_before == 40 - len(stored)
    assert asked_twice(openai_server) <= 2  # at most the two in flight at the kill
    assert ScoringChunk.objects.get(run=run).attempts == 2


def test_a_killed_step_by_step_worker_resumes_each_walk_where_its_replies_end(
    transactional_db: None, workers: Workers, project: Project, openai_server: OpenAIServer
) -> None:
    """Eight logs walked step by step (every reply "no", so every step is asked, keys
    t<id>:s<n>); the worker dies mid-walk, and the next one asks only the steps with no
    stored reply, then writes a verdict per log (no decisive step found)."""
    logs = []
    for n in range(8):
        log = trajectory_with_steps(project, [f"step {i} of {n}" for i in range(5)])
        log.steps.update(agent="Solver")
        logs.append(log)
    openai_server.control(delay=0.1, fixed_reply="Fine.\nDecisive: no")
    queue = f"judge-walk-{uuid.uuid4().hex[:8]}"
    scorer = remote_judge(project, openai_server, "walker", queue, mode="step-by-step")
    run, stored, second = killed_mid_run(workers, project, scorer, queue)
    assert not FailureVerdict.objects.filter(scorer=scorer).exists()
    asked_before = openai_server.stats()["requests"]

    resumed(workers, second, run, queue)
    keys = set(JudgeReply.objects.filter(run=run).values_list("key", flat=True))
    assert keys == {f"t{log.pk}:s{i}" for log in logs for i in range(5)}
    assert openai_server.stats()["requests"] - asked_before == 40 - len(stored)
    assert asked_twice(openai_server) <= 2  # at most the two in flight at the kill
    verdicts = FailureVerdict.objects.filter(scorer=scorer)
    assert verdicts.count() == 8 and set(verdicts.values_list("step", flat=True)) == {None}
    assert run.metrics["calls"] == 40 and run.metrics["verdicts"] == 8
