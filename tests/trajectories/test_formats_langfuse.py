"""The Langfuse parser on the six real trace exports, and on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import parser_for
from trajectories.formats.base import RecordError
from trajectories.formats.langfuse import parse

LANGFUSE = REALDATA / "langfuse"
# trajectories, steps, labelable steps, roots, deepest step, tool calls
SHAPES = {
    "autogen-2025-06-06.trace.json": (1, 2, 1, 1, 1, {}),
    "claude-agent-2025-12-22.trace.json": (1, 7, 4, 1, 1, {"mcp__weather__get_weather": 2}),
    "crewai-2025-07-11.trace.json": (1, 6, 1, 1, 3, {}),
    "google-adk-2025-08-28.trace.json": (1, 5, 2, 1, 3, {"say_hello": 1}),
    "langgraph-python-2025-08-22.trace.json": (1, 9, 2, 1, 2, {"Web-Search": 1}),
    "openai-agents-2025-09-30.trace.json": (1, 5, 2, 1, 2, {"get_weather": 1}),
}


def test_registered_under_its_format_name() -> None:
    assert parser_for("langfuse") is parse


@pytest.mark.parametrize("name", list(SHAPES))
def test_real_file_shape(name: str) -> None:
    assert shape(trajectories(parse(LANGFUSE / name))) == SHAPES[name]


def test_claude_agent_trace_task_scores_tokens_and_cost() -> None:
    [trajectory] = trajectories(parse(LANGFUSE / "claude-agent-2025-12-22.trace.json"))
    assert trajectory.external_id == "097f1d8982fa909b8cffb14a166ec272"
    assert trajectory.task == "What's the weather like in Berlin and New York?"
    assert trajectory.model_name == "claude-sonnet-4-5-20250929"
    assert [(s["name"], s["value"]) for s in trajectory.metadata["scores"]] == [
        ("correctness", 0),
        ("hallucination", 1),
        ("toxicity", 0),
    ]
    assert trajectory.metadata["tokens"] == {"input": 34, "output": 232, "total": 266}
    assert trajectory.metadata["cost"] == pytest.approx(0.003582)
    kinds = [step.kind for step in trajectory.steps]
    assert kinds == [
        "action",
        "message",
        "tool_call",
        "tool_call",
        "tool_result",
        "tool_result",
        "message",
    ]
    berlin = trajectory.steps[4]
    assert (berlin.tool_name, berlin.tool_args) == ("mcp__weather__get_weather", {"city": "Berlin"})
    assert berlin.content == "Weather in Berlin: Cloudy, 59°F"
    # The conversation span started a millisecond after its first turn; it still comes first.
    assert all(step.metadata["parent"] == 0 for step in trajectory.steps[1:])


def test_agent_names_reach_the_steps_below_them() -> None:
    [trajectory] = trajectories(parse(LANGFUSE / "openai-agents-2025-09-30.trace.json"))
    assert [step.agent for step in trajectory.steps] == ["Agent workflow"] + ["Hello world"] * 4
    assert trajectory.task == "What's the weather in Tokyo?"


def test_langgraph_tool_recorded_as_a_span_is_a_tool() -> None:
    [trajectory] = trajectories(parse(LANGFUSE / "langgraph-python-2025-08-22.trace.json"))
    [result] = [step for step in trajectory.steps if step.kind == "tool_result"]
    assert result.tool_name == "Web-Search"
    assert not result.labelable


def test_observation_without_type_names_record_and_field(tmp_path: Path) -> None:
    record = json.loads((LANGFUSE / "autogen-2025-06-06.trace.json").read_text())
    del record["observations"][1]["type"]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(record, indent=1))
    assert list(parse(path)) == [RecordError("record 0", "observations.1.type", "is missing")]
