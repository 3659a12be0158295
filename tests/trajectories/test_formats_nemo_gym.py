"""The NeMo Gym parser on the real rollout files, and on bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import parser_for
from trajectories.formats.base import ParsedTrajectory, RecordError
from trajectories.formats.nemo_gym import parse

NEMO = REALDATA / "rl_nemo_gym"
MATH = NEMO / "example_math_rollouts.jsonl"
CODE = NEMO / "example_rollouts.jsonl"
SWE = NEMO / "example_rollouts_hermes.jsonl"
# trajectories, steps, labelable steps, roots, deepest step, tool calls. The policy's
# steps hang below the prompt's user message, tool results below their call; the SWE
# agent's prompt is not in the rollout (its task is the problem statement), so its steps
# are roots.
SHAPES: dict[Path, tuple[int, int, int, int, int, dict[str, int]]] = {
    MATH: (5, 18, 10, 5, 2, {"execute_code": 3}),
    CODE: (5, 15, 10, 5, 1, {}),
    SWE: (
        5,
        209,
        141,
        141,
        1,
        {
            "terminal": 39,
            "read_file": 11,
            "patch": 5,
            "write_file": 1,
            "skill_manage": 5,
            "search_files": 4,
            "execute_code": 3,
        },
    ),
}
# external id -> (outcome reward, success), in file order.
REWARDS: dict[Path, list[tuple[str, float, bool | None]]] = {
    MATH: [
        ("math_with_judge_hermes_agent:3:0", 0.0, None),
        ("math_with_judge_hermes_agent:0:0", 0.0, None),
        ("math_with_judge_hermes_agent:4:0", 1.0, None),
        ("math_with_judge_hermes_agent:2:0", 0.0, None),
        ("math_with_judge_hermes_agent:1:0", 0.0, None),
    ],
    CODE: [(f"simple_agent:0:{n}", 0.0, None) for n in (1, 3, 4, 0, 2)],
    SWE: [
        ("anyswe_hermes:0:0", 0.0, False),
        ("anyswe_hermes:0:3", 1.0, True),
        ("anyswe_hermes:0:4", 0.0, False),
        ("anyswe_hermes:0:1", 0.0, False),
        ("anyswe_hermes:0:2", 1.0, True),
    ],
}
# task key -> rollouts: the GRPO groups.
GROUPS = {
    MATH: {f"math_with_judge_hermes_agent:{n}": 1 for n in range(5)},
    CODE: {"simple_agent:0": 5},
    SWE: {"anyswe_hermes:0": 5},
}


def test_registered_under_its_format_name() -> None:
    assert parser_for("nemo-gym") is parse


@pytest.mark.parametrize("path", list(SHAPES), ids=lambda path: path.name)
def test_real_file_shape_rewards_and_groups(path: Path) -> None:
    parsed = trajectories(parse(path))
    assert shape(parsed) == SHAPES[path]
    assert [(t.external_id, t.outcome_reward, t.success) for t in parsed] == REWARDS[path]
    assert dict(Counter(t.task_key for t in parsed)) == GROUPS[path]
    # Single-agent rollouts: the agent is the rollout's, in the metadata, not a lane.
    assert {step.agent for t in parsed for step in t.steps} == {""}
    for trajectory in parsed:
        assert trajectory.metadata["agent"] == trajectory.task_key.split(":")[0]
        assert trajectory.task.strip()
        assert all(not step.labelable for step in trajectory.steps if step.metadata.get("prompt"))


def test_code_rollouts_keep_token_counts_and_logprob_sums() -> None:
    parsed = trajectories(parse(CODE))
    messages = [step for t in parsed for step in t.steps if "logprob_sum" in step.metadata]
    assert len(messages) == 5
    # The README's count: 5,023 generated tokens with log probabilities in 5 rollouts.
    assert sum(step.metadata["tokens"]["generated"] for step in messages) == 5023
    raw = json.loads(CODE.read_text(encoding="utf-8").splitlines()[0])
    [message] = [item for item in raw["response"]["output"] if item["type"] == "message"]
    first = parsed[0]
    step = next(step for step in first.steps if "logprob_sum" in step.metadata)
    assert step.metadata["logprob_sum"] == pytest.approx(sum(message["generation_log_probs"]))
    assert step.metadata["tokens"] == {
        "prompt": len(message["prompt_token_ids"]),
        "generated": len(message["generation_token_ids"]),
    }
    assert first.metadata["subtask_score"] == 11.0
    assert first.metadata["usage"] == {
        "input_tokens": 109,
        "output_tokens": 785,
        "total_tokens": 894,
    }
    assert [step.kind for step in first.steps] == ["message", "thought", "message"]


def test_swe_rollout_task_tools_and_results() -> None:
    first = trajectories(parse(SWE))[0]
    assert first.task.startswith("Modeling's `separability_matrix` does not compute")
    assert first.model_name == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    call, result = first.steps[1], first.steps[2]
    assert (call.kind, call.tool_name, call.labelable) == ("tool_call", "terminal", True)
    assert call.tool_args == {
        "command": 'cd /testbed && find . -type f -name "*.py" | grep -i separable'
    }
    assert (result.kind, result.tool_name, result.metadata["parent"]) == (
        "tool_result",
        "terminal",
        1,
    )
    # The tool's JSON answer: its output is the step, the rest metadata.
    assert (
        result.content
        == "./astropy/modeling/separable.py\n./astropy/modeling/tests/test_separable.py"
    )
    assert result.metadata["result"] == {"exit_code": 0, "error": None}
    assert first.metadata["resolved"] is False


def test_math_rollout_answer_and_judge_fields() -> None:
    first = trajectories(parse(MATH))[0]
    assert first.ground_truth == "\\(\\sqrt{2}\\)"
    assert first.metadata["extracted_answer"] == "sqrt(2)/2"
    assert (first.steps[0].role, first.steps[0].labelable) == ("user", False)
    assert first.steps[1].metadata["parent"] == 0


def rollout(**change: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(MATH.read_text(encoding="utf-8").splitlines()[0])
    record.update(change)
    return record


def write_lines(tmp_path: Path, records: list[Any]) -> Path:
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"reward": "1"}, "reward", "expected int or float, got str"),
        ({"_ng_task_index": -1}, "_ng_task_index", "is -1; expected an index from 0"),
        ({"response": {"output": []}}, "response.output", "has nothing the policy wrote"),
        (
            {"response": {"output": [{"type": "web_search"}]}},
            "response.output.0.type",
            "is 'web_search'; expected message, reasoning, a call (function_call, ...)",
        ),
        (
            {"response": {"output": [{"type": "function_call_output", "output": "x"}]}},
            "response.output.0.call_id",
            "is missing",
        ),
        ({"responses_create_params": {"input": 3}}, "responses_create_params.input", "expected"),
    ],
)
def test_bad_rollout_names_line_and_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    record = rollout()
    del record["_ng_rollout_index"]
    results = list(parse(write_lines(tmp_path, [rollout(), rollout(**change), record])))
    assert isinstance(results[0], ParsedTrajectory)
    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("line 2", field)
    assert error.message.startswith(message)
    assert results[2] == RecordError("line 3", "_ng_rollout_index", "is missing")


def test_built_in_tool_calls_are_tool_calls_named_by_type(tmp_path: Path) -> None:
    output = [
        {"type": "web_search_call", "id": "ws_1", "action": {"query": "1900 Olympics"}},
        {"type": "custom_tool_call", "name": "apply_patch", "call_id": "c1", "input": "*** x"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
    ]
    record = rollout(response={"output": output, "model": "m"})
    [trajectory] = trajectories(parse(write_lines(tmp_path, [record])))
    search, patch, done = trajectory.steps[1:]
    assert (search.kind, search.tool_name, search.tool_args) == (
        "tool_call",
        "web_search",
        {"query": "1900 Olympics"},
    )
    assert (patch.tool_name, patch.tool_args) == ("apply_patch", "*** x")
    assert (done.kind, done.tool_name, done.metadata["parent"]) == ("tool_result", "apply_patch", 2)
