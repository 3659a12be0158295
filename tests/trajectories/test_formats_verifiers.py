"""The verifiers parser on the real eval runs (math-python, wordle), and on bad input."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import import_units, parser_for
from trajectories.formats.base import FileError, RecordError
from trajectories.formats.verifiers import parse

VERIFIERS = REALDATA / "rl_verifiers"
MATH = VERIFIERS / "math-python--gpt-4.1-mini" / "dbaac595"
WORDLE = VERIFIERS / "wordle--gpt-5-mini" / "019a631c"
# trajectories, steps, labelable steps, roots, deepest step, tool calls. The prompt's
# system and user messages are roots; the model's turns hang below the user message
# before them (wordle's feedback comes as user turns), tool results below their call.
SHAPES = {
    MATH: (15, 103, 44, 30, 2, {"python": 29}),
    WORDLE: (15, 142, 56, 86, 1, {}),
}
# Rewards of the 15 rollouts, in file order.
REWARDS = {
    MATH: [1.0] * 15,
    WORDLE: [
        1.4933333333,
        1.3266666667,
        1.41,
        1.41,
        1.3028571429,
        1.41,
        1.41,
        1.36,
        1.36,
        1.41,
        1.36,
        1.36,
        1.41,
        1.36,
        1.3266666667,
    ],
}
METRICS = {
    MATH: {"correct_answer_reward_func", "python_calls", "total_tool_calls"},
    WORDLE: {
        "check_answer_reward_func",
        "partial_credit_reward_func",
        "count_turns_reward_func",
        "format_reward_func",
    },
}


def test_registered_and_a_folder_imports_its_results_not_the_metadata() -> None:
    assert parser_for("verifiers") is parse
    assert import_units("verifiers", VERIFIERS) == [
        MATH / "results.jsonl",
        WORDLE / "results.jsonl",
    ]


@pytest.mark.parametrize("where", [MATH, WORDLE / "results.jsonl"], ids=["folder", "results"])
def test_a_run_reads_from_its_folder_or_results(where: Path) -> None:
    folder = where if where.is_dir() else where.parent
    assert shape(trajectories(parse(where))) == SHAPES[folder]


@pytest.mark.parametrize("run", list(SHAPES), ids=lambda run: run.parent.name)
def test_real_run_rewards_groups_and_metrics(run: Path) -> None:
    parsed = trajectories(parse(run))
    assert [t.outcome_reward for t in parsed] == REWARDS[run]
    assert {t.success for t in parsed} == {None}
    env, _, model = run.parent.name.partition("--")
    # 5 examples, 3 rollouts each: the groups.
    assert dict(Counter(t.task_key for t in parsed)) == {f"{env}:{n}": 3 for n in range(5)}
    assert len({t.external_id for t in parsed}) == 15
    for trajectory in parsed:
        assert trajectory.model_name == model
        assert set(trajectory.metadata["metrics"]) == METRICS[run]
        assert set(trajectory.metadata["timing_ms"]) == {"generation_ms", "scoring_ms", "total_ms"}
        assert trajectory.metadata["rollouts_per_example"] == 3
        assert trajectory.metadata["run"] == run.name
        assert {step.agent for step in trajectory.steps} == {""}
    if run == WORDLE:
        first = parsed[0]
        # The reward is the weighted sum of the four reward functions.
        assert first.metadata["metrics"] == {
            "check_answer_reward_func": 1.0,
            "partial_credit_reward_func": 0.0,
            "count_turns_reward_func": 0.3333333333,
            "format_reward_func": 0.8,
        }
        assert first.ground_truth == "story"


def test_math_python_tool_calls_written_as_text_are_decoded() -> None:
    first = trajectories(parse(MATH))[0]
    assert first.external_id == "math-python:dbaac595:0:0"
    assert first.ground_truth == "0"
    call, result = first.steps[2], first.steps[3]
    assert (call.kind, call.tool_name, call.labelable) == ("tool_call", "python", True)
    assert call.tool_args["code"].startswith("from sympy import symbols")
    # The tool's answer names no call: it answers the call before it.
    assert (result.kind, result.tool_name, result.metadata["parent"]) == (
        "tool_result",
        "python",
        2,
    )
    assert result.content.startswith("Traceback (most recent call last)")
    assert first.metadata["metrics"]["total_tool_calls"] == 2.0


def copy_run(tmp_path: Path, run: Path = WORDLE) -> Path:
    return shutil.copytree(run, tmp_path / run.parent.name / run.name)


def rewrite(folder: Path, change: Any) -> Path:
    results = folder / "results.jsonl"
    records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines()]
    change(records)
    results.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return results


def test_without_metadata_the_folders_name_env_and_model(tmp_path: Path) -> None:
    folder = copy_run(tmp_path)
    (folder / "metadata.json").unlink()
    parsed = trajectories(parse(folder))
    assert (parsed[0].model_name, parsed[0].task_key) == ("gpt-5-mini", "wordle:0")
    assert "rollouts_per_example" not in parsed[0].metadata


def test_metadata_alone_is_a_file_error() -> None:
    with pytest.raises(FileError, match=r"a verifiers run.s metadata; import the results\.jsonl"):
        list(parse(WORDLE / "metadata.json"))


def test_bad_rollouts_name_line_and_field(tmp_path: Path) -> None:
    def damage(records: list[dict[str, Any]]) -> None:
        del records[1]["reward"]
        records[2]["completion"] = [{"role": "user", "content": "hi"}]
        records[3]["example_id"] = True
        records[4]["completion"][0]["role"] = "robot"

    folder = copy_run(tmp_path)
    rewrite(folder, damage)
    errors = [result for result in parse(folder) if isinstance(result, RecordError)]
    assert errors == [
        RecordError("line 2", "reward", "is missing"),
        RecordError("line 3", "completion", "has no assistant message to make a labelable step of"),
        RecordError("line 4", "example_id", "expected int or str, got bool"),
        RecordError(
            "line 5",
            "completion.0.role",
            "is 'robot'; expected one of system, developer, user, assistant, tool",
        ),
    ]


def test_a_tool_call_text_that_is_not_json_names_the_call(tmp_path: Path) -> None:
    folder = copy_run(tmp_path, MATH)

    def damage(records: list[dict[str, Any]]) -> None:
        records[0]["completion"][0]["tool_calls"][0] = "{not json"

    rewrite(folder, damage)
    [error] = [result for result in parse(folder) if isinstance(result, RecordError)]
    assert (error.location, error.field) == ("line 1", "completion.0.tool_calls.0")
    assert error.message.startswith("is text that is not a JSON tool call")
