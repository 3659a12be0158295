"""The RL trainer importers: ``trl-completions`` on tables written by a real TRL GRPO
training; ``verl``, ``rllm`` and ``art`` on files written to the exact shape of their
writers' source code (verl's ``_dump_generations``, rLLM's ``Episode.to_dict``, ART's
``write_trajectory_groups_parquet`` and ``TrajectoryGroup.model_dump``), since those
libraries do not install here. Each keeps the trainer's per-step facts, groups one
prompt's rollouts under one task key, and names the record and field of bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.grpo_tiny import grpo_train
from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedTrajectory, RecordError, StepTraining


def parsed(fmt: str, path: Path) -> list[ParsedTrajectory | RecordError]:
    return list(parser_for(fmt)(path))


def only_trajectories(results: list[Any]) -> list[ParsedTrajectory]:
    assert all(isinstance(r, ParsedTrajectory) for r in results), results
    return results


# --- TRL -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grpo_train(tmp_path_factory.mktemp("grpo"))


def test_trl_completions_from_a_real_grpo_run(trl_run: Path) -> None:
    tables = sorted((trl_run / "completions").glob("*.parquet"))
    assert [t.name for t in tables] == ["completions_00001.parquet", "completions_00002.parquet"]
    for table in tables:
        rows = pq.read_table(table).to_pylist()
        trajectories = only_trajectories(parsed("trl-completions", table))
        assert len(trajectories) == len(rows) == 4
        for row, trajectory in zip(rows, trajectories, strict=True):
            prompt, completion = trajectory.steps
            assert (prompt.content, prompt.labelable) == (row["prompt"], False)
            assert (completion.content, completion.labelable) == (row["completion"], True)
            assert completion.training == StepTraining(
                training_step=row["step"], advantage=row["advantage"]
            )
            assert trajectory.training_step == row["step"]
            rewards = {
                "reward_length": row["reward_length"],
                "reward_letter_e": row["reward_letter_e"],
            }
            assert trajectory.metadata["rewards"] == rewards
            assert trajectory.outcome_reward == pytest.approx(sum(rewards.values()))
        # Two prompts, two generations each: two GRPO groups of two.
        assert sorted(Counter(t.task_key for t in trajectories).values()) == [2, 2]
        by_key: dict[str, set[str]] = {}
        for trajectory in trajectories:
            by_key.setdefault(trajectory.task_key, set()).add(trajectory.task)
        assert all(len(tasks) == 1 for tasks in by_key.values())


def test_trl_table_without_an_advantage_column_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "completions_00001.parquet"
    pq.write_table(pa.table({"step": [1], "prompt": ["p"], "completion": ["c"]}), path)
    with pytest.raises(FileError, match="no advantage column"):
        parsed("trl-completions", path)


def test_trl_row_with_a_bad_value_names_row_and_field(tmp_path: Path) -> None:
    path = tmp_path / "completions_00001.parquet"
    table = pa.table(
        {
            "step": [1, 1],
            "prompt": ["p", "p"],
            "completion": ["ok", None],
            "accuracy": [1.0, float("nan")],
            "advantage": [0.5, -0.5],
        }
    )
    pq.write_table(table, path)
    good, bad = parsed("trl-completions", path)
    assert isinstance(good, ParsedTrajectory)
    assert good.metadata["rewards"] == {"accuracy": 1.0}
    assert isinstance(bad, RecordError)
    assert (bad.location, bad.field) == ("row 1", "completion")


# --- verl ----------------------------------------------------------------------------


def verl_dump(path: Path, step: int, rows: list[tuple[str, str, float]]) -> Path:
    """Lines as verl's ``_dump_generations`` writes them: base columns, then the reward
    function's extra infos of the batch's length."""
    lines = [
        json.dumps(
            {
                "input": prompt,
                "output": output,
                "gts": "14",
                "score": score,
                "step": step,
                "acc": score > 0,
                "pred": output[-2:],
            },
            ensure_ascii=False,
        )
        for prompt, output, score in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


PROMPT = "<|im_start|>user\nWhat is 2 + 3 * 4?<|im_end|>\n<|im_start|>assistant\n"


def test_verl_dump_lines_become_two_step_rollouts_grouped_by_prompt(tmp_path: Path) -> None:
    path = verl_dump(
        tmp_path / "12.jsonl",
        12,
        [
            (PROMPT, "3 * 4 = 12, 12 + 2 = 14", 1.0),
            (PROMPT, "2 + 3 = 5, 5 * 4 = 20", 0.0),
            ("<|im_start|>user\nOther<|im_end|>\n", "x", 0.0),
        ],
    )
    first, second, other = only_trajectories(parsed("verl", path))
    assert first.task == PROMPT
    assert first.external_id == "step-12:1"
    assert (first.outcome_reward, first.success, first.ground_truth) == (1.0, True, "14")
    assert (second.outcome_reward, second.success) == (0.0, False)
    assert first.task_key == second.task_key != other.task_key
    assert first.steps[1].training == StepTraining(training_step=12)
    assert first.training_step == 12
    assert first.metadata == {"acc": True, "pred": "14"}
    assert [s.labelable for s in first.steps] == [False, True]


def test_verl_bad_line_names_line_and_field(tmp_path: Path) -> None:
    path = verl_dump(tmp_path / "3.jsonl", 3, [(PROMPT, "14", 1.0)] * 3)
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    del broken["output"]
    worse = json.loads(lines[2])
    worse["score"] = "high"
    path.write_text("\n".join([lines[0], json.dumps(broken), json.dumps(worse)]) + "\n")
    good, missing, wrong = parsed("verl", path)
    assert isinstance(good, ParsedTrajectory)
    assert isinstance(missing, RecordError)
    assert isinstance(wrong, RecordError)
    assert (missing.location, missing.field, missing.message) == ("line 2", "output", "is missing")
    assert (wrong.location, wrong.field) == ("line 3", "score")


# --- rLLM ----------------------------------------------------------------------------


def rllm_step(
    messages: list[dict[str, Any]],
    response: str,
    *,
    logprobs: list[float],
    advantage: Any,
    mc_return: float,
    done: bool,
    version: int,
) -> dict[str, Any]:
    """``Step.to_dict()`` of rllm/agents/agent.py, key for key."""
    return {
        "prompt_ids": [1, 2, 3],
        "response_ids": list(range(len(logprobs))),
        "logprobs": logprobs,
        "routing_matrices": None,
        "chat_completions": [*messages, {"role": "assistant", "content": response}],
        "observation": messages[-1]["content"],
        "thought": "",
        "action": None,
        "model_response": response,
        "model_output": None,
        "info": {},
        "reward": 1.0 if done else 0.0,
        "done": done,
        "mc_return": mc_return,
        "advantage": advantage,
        "weight_version": version,
    }


def rllm_episode(rollout: int, correct: bool) -> dict[str, Any]:
    """``Episode.to_dict()``: one solver trajectory of two model calls (a tool call, then
    the answer after the tool's output), plus the trainer's step."""
    system = {"role": "system", "content": "Use the calculator."}
    user = {"role": "user", "content": "What is 2 + 3 * 4?"}
    tool = {"role": "tool", "content": "12"}
    first = rllm_step(
        [system, user],
        "calc(3 * 4)",
        logprobs=[-0.5, -1.5],
        advantage=0.5,
        mc_return=1.0,
        done=False,
        version=7,
    )
    second = rllm_step(
        [system, user, {"role": "assistant", "content": "calc(3 * 4)"}, tool],
        "14" if correct else "20",
        logprobs=[-0.25, -0.25, -1.0],
        advantage=[0.5, 1.5],
        mc_return=1.0,
        done=True,
        version=7,
    )
    return {
        "id": f"task-7:{rollout}",
        "task": {"question": "What is 2 + 3 * 4?", "ground_truth": "14"},
        "termination_reason": "env_done",
        "is_correct": correct,
        "session_id": None,
        "step": 40,
        "trajectories": [
            {
                "uid": f"uid-{rollout}",
                "name": "solver",
                "task": {"question": "What is 2 + 3 * 4?", "ground_truth": "14"},
                "steps": [first, second],
                "reward": 1.0 if correct else 0.0,
                "info": {},
            }
        ],
        "metrics": {"solver_acc": 1.0 if correct else 0.0},
        "info": {},
    }


def test_rllm_episodes_keep_each_calls_training_facts(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(rllm_episode(i, i == 0)) + "\n" for i in range(2)))
    right, wrong = only_trajectories(parsed("rllm", path))
    assert right.task_key == wrong.task_key == "task-7:solver"
    assert right.external_id == "task-7:0/uid-0"
    assert (right.task, right.ground_truth) == ("What is 2 + 3 * 4?", "14")
    assert (right.outcome_reward, right.success, wrong.success) == (1.0, True, False)
    assert (right.policy_version, right.training_step) == ("7", 40)
    kinds = [(s.kind, s.role, s.labelable) for s in right.steps]
    assert kinds == [
        ("message", "system", False),
        ("message", "user", False),
        ("message", "assistant", True),
        ("tool_result", "tool", False),
        ("answer", "assistant", True),
    ]
    call, answer = right.steps[2], right.steps[4]
    assert call.training == StepTraining(
        policy_version="7",
        training_step=40,
        logprob_sum=-2.0,
        logprob_mean=-1.0,
        logprob_min=-1.5,
        advantage=0.5,
        returns=1.0,
    )
    assert answer.training is not None
    assert answer.training.advantage == 1.0  # the per-token list's mean
    assert answer.metadata["advantage_tokens"] == 2
    assert answer.training.token_logprobs is None
    assert "logprobs" not in right.raw["steps"][0]
    [kept, _] = only_trajectories(parsed("rllm-tokens", path))
    assert kept.steps[4].training is not None
    assert kept.steps[4].training.token_logprobs == [-0.25, -0.25, -1.0]


def test_rllm_bad_logprob_names_record_and_field(tmp_path: Path) -> None:
    episode = rllm_episode(0, True)
    episode["trajectories"][0]["steps"][1]["logprobs"][2] = "low"
    path = tmp_path / "episode.json"
    path.write_text(json.dumps([rllm_episode(1, False), episode]))
    good, bad = parsed("rllm", path)
    assert isinstance(good, ParsedTrajectory)
    assert isinstance(bad, RecordError)
    assert (bad.location, bad.field) == ("record 1", "trajectories.0.steps.1.logprobs.2")


# --- ART -----------------------------------------------------------------------------


def art_trajectory(reward: float, answer: str) -> dict[str, Any]:
    """``Trajectory.model_dump(mode="json")`` as ART's v2 Parquet keeps it."""
    return {
        "messages_and_choices": [
            {"role": "system", "content": "You answer arithmetic."},
            {"role": "user", "content": "What is 2 + 3 * 4?"},
            {
                "finish_reason": "stop",
                "index": 0,
                "logprobs": {
                    "content": [
                        {"token": "1", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                        {"token": "4", "logprob": -1.5, "bytes": None, "top_logprobs": []},
                    ],
                    "refusal": None,
                },
                "message": {"content": answer, "role": "assistant", "tool_calls": None},
            },
        ],
        "tools": None,
        "additional_histories": [],
        "reward": reward,
        "initial_policy_version": 3,
        "final_policy_version": 4,
        "metrics": {"correct": reward > 0},
        "metadata": {"scenario": "arith-7"},
        "logs": [],
    }


def art_parquet_v2(path: Path, groups: list[list[dict[str, Any]]]) -> Path:
    """The columns of ART's ``write_trajectory_groups_parquet`` (format version 2)."""
    rows = []
    for group_index, trajectories in enumerate(groups):
        group_json = json.dumps({"metadata": {}, "metrics": {}, "logs": [], "exceptions": []})
        for trajectory_index, trajectory in enumerate(trajectories):
            rows.append(
                {
                    "format_version": 2,
                    "group_index": group_index,
                    "trajectory_index": trajectory_index,
                    "group_json": group_json,
                    "trajectory_json": json.dumps(trajectory),
                    "reward": trajectory["reward"],
                    "metrics": json.dumps(trajectory["metrics"]),
                    "metadata": json.dumps(trajectory["metadata"]),
                }
            )
    pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")
    return path


def test_art_parquet_v2_keeps_policy_versions_and_logprobs(tmp_path: Path) -> None:
    path = art_parquet_v2(
        tmp_path / "0003.parquet",
        [[art_trajectory(1.0, "14"), art_trajectory(0.0, "20")], [art_trajectory(1.0, "14")]],
    )
    first, second, third = only_trajectories(parsed("art", path))
    assert first.task_key == second.task_key != third.task_key
    assert (first.external_id, third.external_id) == ("0003:0:0", "0003:1:0")
    assert (first.outcome_reward, first.policy_version, first.training_step) == (1.0, "3", 3)
    assert first.metadata["final_policy_version"] == "4"
    assert first.metadata["metrics"] == {"correct": True}
    assert first.task == "What is 2 + 3 * 4?"
    assert [s.labelable for s in first.steps] == [False, False, True]
    assert first.steps[2].content == "14"
    assert first.steps[2].training == StepTraining(
        policy_version="3", training_step=3, logprob_sum=-2.0, logprob_mean=-1.0, logprob_min=-1.5
    )
    renamed = path.rename(tmp_path / "upload")  # a Parquet file is known by its bytes too
    assert len(only_trajectories(parsed("art", renamed))) == 3
    [kept, _, _] = only_trajectories(parsed("art-tokens", renamed))
    assert kept.steps[2].training is not None
    assert kept.steps[2].training.token_logprobs == [-0.5, -1.5]


def test_art_parquet_v1_reads_the_flattened_messages(tmp_path: Path) -> None:
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.string()),
            ("tool_call_id", pa.string()),
            ("trainable", pa.bool_()),
        ]
    )
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"x": 1}'}}
    ]
    rows = [
        {
            "group_index": 0,
            "reward": 0.5,
            "metrics": None,
            "metadata": None,
            "messages": [
                {
                    "role": "user",
                    "content": "Add.",
                    "tool_calls": None,
                    "tool_call_id": None,
                    "trainable": False,
                },
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": json.dumps(calls),
                    "tool_call_id": None,
                    "trainable": True,
                },
            ],
        }
    ]
    schema = pa.schema(
        [
            ("group_index", pa.int64()),
            ("reward", pa.float64()),
            ("metrics", pa.string()),
            ("metadata", pa.string()),
            ("messages", pa.list_(message)),
        ]
    )
    path = tmp_path / "0001.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    [trajectory] = only_trajectories(parsed("art", path))
    call = trajectory.steps[1]
    assert (call.kind, call.tool_name, call.tool_args, call.labelable) == (
        "tool_call",
        "calc",
        {"x": 1},
        True,
    )
    assert call.training == StepTraining(training_step=1)


def test_art_log_body_and_its_bad_trajectory(tmp_path: Path) -> None:
    bad = art_trajectory(1.0, "14")
    del bad["reward"]
    body = {"trajectory_groups": [{"trajectories": [art_trajectory(1.0, "14"), bad]}]}
    path = tmp_path / "log.json"
    path.write_text(json.dumps(body))
    good, error = parsed("art", path)
    assert isinstance(good, ParsedTrajectory)
    assert good.policy_version == "3"
    assert isinstance(error, RecordError)
    assert (error.location, error.field, error.message) == (
        "record 0",
        "trajectory_groups.0.trajectories.1.reward",
        "is missing",
    )


def test_a_parquet_file_that_is_not_art_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "0001.parquet"
    pq.write_table(pa.table({"x": [1]}), path)
    with pytest.raises(FileError, match="not an ART trajectory file"):
        parsed("art", path)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(FileError, match="not a Parquet file"):
        parsed("art", tmp_path / "junk.parquet")


# --- Through the import ----------------------------------------------------------------


@pytest.mark.django_db
def test_trainer_files_import_with_their_facts_and_groups(trl_run: Path, tmp_path: Path) -> None:
    from trajectories.models import Step, Trajectory
    from trajectories.services import project_create, trajectory_import

    project = project_create(slug="rl", name="rl")
    completions = trl_run / "completions" / "completions_00001.parquet"
    batch = trajectory_import(project=project, source_format="trl-completions", path=completions)
    assert batch.created_count == 4
    rows = pq.read_table(completions).to_pylist()
    stored = Step.objects.filter(trajectory__project=project, labelable=True)
    assert sorted(stored.values_list("content", "advantage", "training_step")) == sorted(
        (r["completion"], r["advantage"], 1) for r in rows
    )
    # One prompt's rollouts are one task group and share the prompt step's prefix hash.
    groups = Counter(Trajectory.objects.filter(project=project).values_list("task_key", flat=True))
    assert sorted(groups.values()) == [2, 2]
    prompt_hashes = Counter(
        Step.objects.filter(trajectory__project=project, index=0).values_list(
            "prefix_hash", flat=True
        )
    )
    assert sorted(prompt_hashes.values()) == [2, 2]

    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(json.dumps(rllm_episode(i, i == 0)) + "\n" for i in range(2)))
    trajectory_import(project=project, source_format="rllm", path=episodes)
    answer = Step.objects.get(trajectory__external_id="task-7:0/uid-0", index=4)
    assert (answer.policy_version, answer.training_step, answer.advantage, answer.returns) == (
        "7",
        40,
        1.0,
        1.0,
    )
    assert (answer.logprob_sum, answer.logprob_min, answer.token_logprobs) == (-1.5, -1.0, None)

    art = art_parquet_v2(tmp_path / "0003.parquet", [[art_trajectory(1.0, "14")]])
    trajectory_import(project=project, source_format="art", path=art)
    assert Trajectory.objects.get(external_id="0003:0:0").policy_version == "3"

    dump = verl_dump(tmp_path / "12.jsonl", 12, [(PROMPT, "14", 1.0)])
    trajectory_import(project=project, source_format="verl", path=dump)
    assert Trajectory.objects.get(source_format="verl").training_step == 12

    # Importing the same files again changes nothing.
    again = trajectory_import(project=project, source_format="rllm", path=episodes)
    assert (again.created_count, again.unchanged_count) == (0, 2)
