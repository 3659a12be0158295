"""The client's trainer hooks against a live Stepscope: a real TRL GRPO training of a
tiny randomly initialised model on the CPU with ``StepscopeCallback`` pushing each
logging step's completions, and the batch hook for verl/prime-rl style loops."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from stepscope_client import Client
from stepscope_client.trainers import rollout_batch_push, rollout_records, storable_text
from stepscope_client.trl import StepscopeCallback

from tests.grpo_tiny import grpo_train
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stepscope(live_server: Any, token: str) -> Iterator[Client]:
    with Client(live_server.url, token) as stepscope:
        yield stepscope


def test_a_grpo_run_pushes_every_completion_with_reward_and_advantage(
    stepscope: Client, project: Project, tmp_path: Path
) -> None:
    started = time.monotonic()
    callback = StepscopeCallback(stepscope, project.slug, run="tiny")
    output = grpo_train(tmp_path, steps=3, callbacks=[callback])
    took = time.monotonic() - started

    tables = sorted((output / "completions").glob("*.parquet"))
    assert [table.name for table in tables] == [f"completions_0000{n}.parquet" for n in (1, 2, 3)]
    assert callback.pushed == {table.name: 4 for table in tables}
    expected = set()
    for table in tables:
        for index, row in enumerate(pq.read_table(table).to_pylist()):
            rewards = {
                "reward_length": row["reward_length"],
                "reward_letter_e": row["reward_letter_e"],
            }
            # A random model writes any bytes: a NUL (which PostgreSQL cannot store)
            # arrives replaced, counted on the step.
            completion, replaced = storable_text(row["completion"])
            expected.add(
                (
                    f"tiny:step-{row['step']}:{index}",
                    row["step"],
                    completion,
                    replaced,
                    row["advantage"],
                    sum(rewards.values()),
                    tuple(sorted(rewards.items())),
                )
            )
    pushed = set()
    for trajectory in Trajectory.objects.filter(project=project):
        answer = Step.objects.get(trajectory=trajectory, index=1)
        rewards = trajectory.metadata["rewards"]
        pushed.add(
            (
                trajectory.external_id,
                answer.training_step,
                answer.content,
                answer.metadata.get("replaced_characters", 0),
                answer.advantage,
                trajectory.outcome_reward,
                tuple(sorted(rewards.items())),
            )
        )
        assert trajectory.training_step == answer.training_step
    assert pushed == expected
    # Each step's two prompts, two generations each: task groups of two.
    per_step_groups: dict[int, dict[str, int]] = {}
    for trajectory in Trajectory.objects.filter(project=project):
        groups = per_step_groups.setdefault(trajectory.training_step or 0, {})
        groups[trajectory.task_key] = groups.get(trajectory.task_key, 0) + 1
    assert all(sorted(groups.values()) == [2, 2] for groups in per_step_groups.values())
    assert took < 40, f"the training with the callback took {took:.1f} s"


def test_the_callback_needs_the_completions_logged(stepscope: Client, project: Project) -> None:
    class Args:
        log_completions = False
        output_dir = "out"

    with pytest.raises(ValueError, match="log_completions=True"):
        StepscopeCallback(stepscope, project.slug).on_train_begin(Args(), None, None)


def test_a_loops_batch_is_pushed_with_its_training_facts(
    stepscope: Client, project: Project
) -> None:
    batch: dict[str, list[Any]] = {
        "prompt": ["What is 2 + 3 * 4?", "What is 2 + 3 * 4?", "Name a prime."],
        "completion": ["14", "20", "7"],
        "reward": [1.0, 0.0, 1.0],
        "advantage": [0.71, -0.71, 0.0],
        "logprobs": [[-0.25, -0.5], [-1.0, -2.0], [-0.1]],
        "uid": ["q1", "q1", "q2"],
    }
    result = rollout_batch_push(
        stepscope, project.slug, batch, step=12, policy_version="global_step_11", run="verl"
    )
    assert result.created == 3
    again = rollout_batch_push(
        stepscope, project.slug, batch, step=12, policy_version="global_step_11", run="verl"
    )
    assert (again.created, again.unchanged) == (0, 3)
    answer = Step.objects.get(trajectory__external_id="verl:step-12:1", index=1)
    assert (answer.policy_version, answer.training_step, answer.advantage) == (
        "global_step_11",
        12,
        -0.71,
    )
    assert (answer.logprob_sum, answer.logprob_mean, answer.logprob_min) == (-3.0, -1.5, -2.0)
    keys = Trajectory.objects.filter(project=project).values_list("task_key", flat=True)
    assert sorted(keys) == ["rollout:q1", "rollout:q1", "rollout:q2"]


def test_a_bad_batch_names_the_column() -> None:
    with pytest.raises(ValueError, match="unknown batch columns: rewards"):
        rollout_records({"prompt": ["p"], "completion": ["c"], "rewards": [1]}, step=1)
    with pytest.raises(ValueError, match="'advantage' has 2 values, 'prompt' 1"):
        rollout_records({"prompt": ["p"], "completion": ["c"], "advantage": [1, 2]}, step=1)


def test_text_postgres_cannot_store_is_replaced_and_counted() -> None:
    [record] = rollout_records({"prompt": ["p\x00"], "completion": ["a\ud800b\x00"]}, step=1)
    prompt, answer = record["steps"]
    assert (prompt["content"], prompt["metadata"]) == ("p\ufffd", {"replaced_characters": 1})
    assert (answer["content"], answer["metadata"]) == ("a\ufffdb\ufffd", {"replaced_characters": 2})
