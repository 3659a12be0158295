"""The OpenTelemetry parser on the real span files, on OTLP JSON and on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import parser_for
from trajectories.formats.base import RecordError
from trajectories.formats.otel import parse

OTEL = REALDATA / "otel_openinference"
# trajectories, steps, labelable steps, roots, deepest step, tool calls
SHAPES: dict[str, tuple[int, int, int, int, int, dict[str, int]]] = {
    "all-spans.json": (10, 10, 4, 10, 0, {}),
    "openinference_client_span_tool_calls.json": (1, 1, 1, 1, 0, {}),
    "otel_genai_client_span_tool_calls.json": (1, 1, 1, 1, 0, {}),
    "otel_genai_tool_execution_span.json": (1, 1, 0, 1, 0, {}),
}


def otlp(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]
                },
                "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}],
            }
        ]
    }


AGENT_TRACE: list[dict[str, Any]] = [
    {
        "traceId": "t1",
        "spanId": "a",
        "name": "invoke_agent planner",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000003000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
            {"key": "gen_ai.agent.name", "value": {"stringValue": "planner"}},
        ],
    },
    {
        "traceId": "t1",
        "spanId": "b",
        "parentSpanId": "a",
        "name": "chat gpt-4o",
        "startTimeUnixNano": "1700000000100000000",
        "endTimeUnixNano": "1700000001100000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "7"}},
            {
                "key": "gen_ai.input.messages",
                "value": {
                    "stringValue": json.dumps(
                        [
                            {
                                "role": "user",
                                "parts": [{"type": "text", "content": "Weather in Paris?"}],
                            }
                        ]
                    )
                },
            },
            {
                "key": "gen_ai.output.messages",
                "value": {
                    "stringValue": json.dumps(
                        [
                            {
                                "role": "assistant",
                                "parts": [
                                    {
                                        "type": "tool_call",
                                        "id": "c1",
                                        "name": "get_weather",
                                        "arguments": {"city": "Paris"},
                                    }
                                ],
                            }
                        ]
                    )
                },
            },
        ],
    },
    {
        "traceId": "t1",
        "spanId": "c",
        "parentSpanId": "a",
        "name": "execute_tool get_weather",
        "startTimeUnixNano": "1700000001200000000",
        "endTimeUnixNano": "1700000001300000000",
        "status": {"code": 2, "message": "timeout"},
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
            {"key": "gen_ai.tool.name", "value": {"stringValue": "get_weather"}},
            {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": '{"city": "Paris"}'}},
        ],
    },
]


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_registered_under_its_format_name() -> None:
    assert parser_for("otel") is parse


@pytest.mark.parametrize("name", list(SHAPES))
def test_real_file_shape(name: str) -> None:
    assert shape(trajectories(parse(OTEL / name))) == SHAPES[name]


def test_openinference_and_genai_fixtures_read_the_same_call() -> None:
    [inference] = trajectories(parse(OTEL / "openinference_client_span_tool_calls.json"))
    [genai] = trajectories(parse(OTEL / "otel_genai_client_span_tool_calls.json"))
    for trajectory in (inference, genai):
        assert trajectory.task == "Weather in Paris?"
        assert trajectory.model_name == "gpt-4-0613"
        [step] = trajectory.steps
        assert step.content.startswith("The weather in Paris is currently rainy")
        assert step.metadata["tokens"]["input"] == 97
        assert step.metadata["tokens"]["output"] == 52
    assert inference.steps[0].metadata["tokens"]["total"] == 149


def test_tool_execution_span_is_a_tool_result_with_its_arguments() -> None:
    [trajectory] = trajectories(parse(OTEL / "otel_genai_tool_execution_span.json"))
    [step] = trajectory.steps
    assert (step.kind, step.role, step.labelable) == ("tool_result", "tool", False)
    assert step.tool_name == "get_weather"
    assert step.tool_args == {"city": "New York"}
    assert step.metadata["tool_call_id"] == "1234"


def test_vercel_spans_one_trajectory_per_trace_with_latency() -> None:
    parsed = trajectories(parse(OTEL / "all-spans.json"))
    assert len({t.external_id for t in parsed}) == 10
    first = parsed[0]
    assert first.task == "Write a haiku about programming."
    assert first.steps[0].metadata["duration_ms"] == pytest.approx(1779.416, abs=0.01)
    assert first.steps[0].metadata["start"] == "2026-02-03T15:19:52.242000Z"


def test_otlp_agent_trace_keeps_the_tree(tmp_path: Path) -> None:
    [trajectory] = trajectories(parse(write(tmp_path / "t.json", otlp(AGENT_TRACE))))
    agent, call, result = trajectory.steps
    assert trajectory.external_id == "t1"
    assert trajectory.task == "Weather in Paris?"
    assert trajectory.metadata["service_name"] == "agent"
    assert "parent" not in agent.metadata
    assert call.metadata["parent"] == 0 and result.metadata["parent"] == 0
    assert call.metadata["parent_span_id"] == "a"
    assert (call.kind, call.tool_name, call.tool_args, call.agent) == (
        "tool_call",
        "get_weather",
        {"city": "Paris"},
        "planner",
    )
    assert call.labelable and not result.labelable and not agent.labelable
    assert result.metadata["error"] == "timeout"
    assert trajectory.metadata["tokens"] == {"input": 12, "output": 7}
    assert trajectory.metadata["duration_ms"] == 3000.0


def test_json_lines_of_spans_group_by_trace(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(span) + "\n" for span in reversed(AGENT_TRACE)))
    [trajectory] = trajectories(parse(path))
    assert [s.metadata["span_id"] for s in trajectory.steps] == ["a", "b", "c"]
    assert trajectory.location == "line 1"


def test_span_without_id_names_line_and_field(tmp_path: Path) -> None:
    broken = {key: value for key, value in AGENT_TRACE[1].items() if key != "spanId"}
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps(AGENT_TRACE[0]) + "\n" + json.dumps(broken) + "\n")
    results = list(parse(path))
    errors = [r for r in results if isinstance(r, RecordError)]
    assert errors == [RecordError("line 2", "spanId", "is missing")]


def test_bad_time_in_otlp_names_the_span(tmp_path: Path) -> None:
    spans = [dict(AGENT_TRACE[0], startTimeUnixNano="yesterday")]
    [error] = list(parse(write(tmp_path / "t.json", otlp(spans))))
    assert isinstance(error, RecordError)
    # One compact object on one line reads as JSON Lines.
    assert error.location == "line 1"
    assert error.field == "resourceSpans.0.scopeSpans.0.spans.0.startTimeUnixNano"


@pytest.mark.parametrize(
    "start",
    [
        # OpenTelemetry-JS [seconds, nanoseconds] pairs past what a date holds
        [9.2e18, 0],
        [6.8e16, 0],
        [253402300800, 0],  # the year 10000
        [1_700_000_000, 1e30],
    ],
)
def test_a_time_no_date_can_hold_names_the_span(tmp_path: Path, start: object) -> None:
    span = {key: value for key, value in AGENT_TRACE[0].items() if key != "startTimeUnixNano"}
    path = tmp_path / "spans.jsonl"
    path.write_text(json.dumps({**span, "startTime": start}) + "\n")
    [error] = list(parse(path))
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("line 1", "startTime")
    assert "not a time" in error.message
