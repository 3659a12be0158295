"""The LangSmith parser on the real SDK payloads, a nested run tree, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import parser_for
from trajectories.formats.base import RecordError
from trajectories.formats.langsmith import parse

LANGSMITH = REALDATA / "langsmith"
SHAPES: dict[str, tuple[int, int, int, int, int, dict[str, int]]] = {
    "langsmith_js_wrap_openai_default.json": (1, 1, 1, 1, 0, {}),
    "langsmith_py_wrap_openai_.json": (1, 1, 1, 1, 0, {}),
}
TREE = {
    "id": "r1",
    "name": "agent",
    "run_type": "chain",
    "start_time": "2024-10-11T20:58:23+00:00",
    "end_time": "2024-10-11T20:58:26+00:00",
    "inputs": {"question": "What is 6 * 7?"},
    "child_runs": [
        {
            "id": "r2",
            "name": "ChatOpenAI",
            "run_type": "llm",
            "start_time": "2024-10-11T20:58:23.100000+00:00",
            "end_time": "2024-10-11T20:58:24+00:00",
            "inputs": {"messages": [{"role": "user", "content": "What is 6 * 7?"}]},
            "outputs": {
                "generations": [
                    [
                        {
                            "text": "",
                            "message": {
                                "role": "assistant",
                                "tool_calls": [
                                    {
                                        "id": "c1",
                                        "function": {"name": "calc", "arguments": '{"x": "6*7"}'},
                                    }
                                ],
                            },
                        }
                    ]
                ],
                "llm_output": {"token_usage": {"prompt_tokens": 10, "completion_tokens": 4}},
            },
            "extra": {"metadata": {"ls_model_name": "gpt-4o"}},
        },
        {
            "id": "r3",
            "name": "calc",
            "run_type": "tool",
            "start_time": 1728680304500,
            "end_time": 1728680304600,
            "inputs": {"input": {"x": "6*7"}},
            "outputs": {"output": "42"},
        },
    ],
}


def test_registered_under_its_format_name() -> None:
    assert parser_for("langsmith") is parse


@pytest.mark.parametrize("name", list(SHAPES))
def test_real_file_shape(name: str) -> None:
    assert shape(trajectories(parse(LANGSMITH / name))) == SHAPES[name]


@pytest.mark.parametrize("name", list(SHAPES))
def test_post_and_patch_merge_into_one_run(name: str) -> None:
    [trajectory] = trajectories(parse(LANGSMITH / name))
    [step] = trajectory.steps
    assert trajectory.task == "howdy"
    assert trajectory.model_name == "gpt-4o-mini"
    assert step.content == "Howdy! How can I assist you today?"
    assert step.metadata["tokens"] == {"input": 9, "output": 9, "total": 18}
    assert step.metadata["duration_ms"] > 1000


def test_nested_child_runs_keep_the_tree(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(TREE, indent=1))
    [trajectory] = trajectories(parse(path))
    _chain, llm, tool = trajectory.steps
    assert trajectory.external_id == "r1"
    assert trajectory.task == "What is 6 * 7?"
    assert (llm.kind, llm.tool_name, llm.tool_args, llm.labelable) == (
        "tool_call",
        "calc",
        {"x": "6*7"},
        True,
    )
    assert llm.metadata["tokens"] == {"input": 10, "output": 4}
    assert (tool.kind, tool.content, tool.tool_args, tool.labelable) == (
        "tool_result",
        "42",
        {"x": "6*7"},
        False,
    )
    assert llm.metadata["parent"] == tool.metadata["parent"] == 0
    assert tool.metadata["duration_ms"] == pytest.approx(100.0)


def test_run_without_id_names_its_path(tmp_path: Path) -> None:
    broken = json.loads(json.dumps(TREE))
    del broken["child_runs"][1]["id"]
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(broken, indent=1))
    assert list(parse(path)) == [RecordError("record 0", "child_runs.1.id", "is missing")]
