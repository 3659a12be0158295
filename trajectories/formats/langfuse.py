"""Langfuse trace exports: a trace and its observations, one trajectory per trace.

A record is ``{"trace": {...}, "observations": [...]}`` (the UI's trace download merged
with its observations), or a trace object that holds its ``observations`` itself (the
public API's ``GET /traces/{id}``). A file holds one record, a JSON array of them, or
JSON Lines of them, read through :func:`jsonstream.iter_records`.

Observations are ``{id, parentObservationId, type, name, startTime, endTime, input,
output, model, usageDetails, costDetails, level, statusMessage, metadata}``; the tree
comes from ``parentObservationId``. ``type`` says what a step is: ``GENERATION`` is a
model call, ``TOOL`` a tool execution, ``AGENT`` an agent run; ``SPAN``, ``CHAIN`` and
the rest are structure. Some integrations (LangGraph) record a tool as a ``SPAN`` named
after the tool: a span whose name a model call in the trace called as a tool is read as
a tool. ``input``, ``output`` and ``metadata`` are often JSON strings and are decoded.
The trace's ``scores`` (LLM-judge or human evaluations) are kept in the trajectory's
metadata; they are not an outcome, since nothing says which score is the reward.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register, spans
from trajectories.formats.base import (
    FieldError,
    ParsedTrajectory,
    ParseResult,
    require,
)
from trajectories.formats.chat_content import decode, first_user_text, output_text_and_calls
from trajectories.formats.spans import Span

KINDS = {
    "GENERATION": "llm",
    "TOOL": "tool",
    "AGENT": "agent",
    "CHAIN": "chain",
    "SPAN": "span",
    "EVENT": "event",
    "EMBEDDING": "embedding",
    "RETRIEVER": "retriever",
    "EVALUATOR": "evaluator",
    "GUARDRAIL": "guardrail",
}
TOKEN_KEYS = ("input", "output", "total")


@register("langfuse", label="Langfuse trace export")
def parse(path: Path) -> Iterator[ParseResult]:
    yield from jsonstream.records_built(path, _trajectory)


def _trajectory(record: Any, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a trace export object, got {type(record).__name__}")
    if "trace" in record:
        trace = require(record, "trace", dict)
        observations = require(record, "observations", list)
        where = "observations"
    else:
        trace = record
        observations = require(record, "observations", list)
        where = "observations"
    trace_path = "trace" if "trace" in record else ""
    trace_id = require(trace, "id", str, trace_path)
    if not trace_id.strip():
        raise FieldError(f"{trace_path}.id" if trace_path else "id", "is empty")
    if not observations:
        raise FieldError(where, "is empty; a trace needs at least one observation")

    trace_spans = [
        _span(observation, f"{where}.{number}", number)
        for number, observation in enumerate(observations)
    ]
    _tools_recorded_as_spans(trace_spans)
    tree = spans.build(trace_spans)
    task = first_user_text(trace.get("input")) or tree.task
    metadata: dict[str, Any] = {"trace_id": trace_id, **tree.totals}
    for key, name in (
        ("name", "trace_name"),
        ("sessionId", "session_id"),
        ("userId", "user_id"),
        ("tags", "tags"),
        ("latency", "latency_s"),
        ("environment", "environment"),
    ):
        value = decode(trace.get(key))
        if value not in (None, "", []):
            metadata[name] = value
    scores = trace.get("scores")
    if isinstance(scores, list) and scores:
        metadata["scores"] = [_score(score) for score in scores if isinstance(score, dict)]
    output_text, _ = output_text_and_calls(trace.get("output"))
    if output_text:
        metadata["output"] = output_text
    return ParsedTrajectory(
        external_id=trace_id,
        task=task,
        steps=tree.steps,
        model_name=tree.model,
        metadata=metadata,
        raw=record,
        location=location,
    )


def _span(observation: Any, where: str, number: int) -> Span:
    if not isinstance(observation, dict):
        raise FieldError(where, f"expected an observation object, got {type(observation).__name__}")
    span_id = require(observation, "id", str, where)
    parent = observation.get("parentObservationId")
    if parent is not None and not isinstance(parent, str):
        raise FieldError(f"{where}.parentObservationId", "expected str or null")
    kind_name = require(observation, "type", str, where)
    name = observation.get("name")
    span = Span(
        span_id=span_id,
        parent_span_id=parent or "",
        kind=KINDS.get(kind_name.upper(), kind_name.lower()),
        name=name if isinstance(name, str) else kind_name,
        order=number,
        start=spans.seconds(observation.get("startTime"), f"{where}.startTime"),
        end=spans.seconds(observation.get("endTime"), f"{where}.endTime"),
        input=decode(observation.get("input")),
        output=decode(observation.get("output")),
    )
    model = observation.get("model")
    span.model = model if isinstance(model, str) else ""
    usage = observation.get("usageDetails")
    if isinstance(usage, dict):
        for key in TOKEN_KEYS:
            value = spans.count(usage.get(key))
            if value is not None:
                span.tokens[key] = value
    cost = observation.get("costDetails")
    if isinstance(cost, dict):
        span.cost = spans.money(cost.get("total"))
    if observation.get("level") == "ERROR":
        message = observation.get("statusMessage")
        span.error = message if isinstance(message, str) and message else "error"
    if span.kind == "tool":
        span.tool_name = span.name
        span.tool_args = _tool_arguments(span.input)
    return span


def _tools_recorded_as_spans(trace_spans: list[Span]) -> None:
    called: set[str] = set()
    for span in trace_spans:
        if span.kind == "llm":
            _, calls = output_text_and_calls(span.output)
            called.update(call["name"] for call in calls)
    for span in trace_spans:
        if span.kind == "span" and span.name in called:
            span.kind = "tool"
            span.tool_name = span.name
            span.tool_args = _tool_arguments(span.input)


def _tool_arguments(value: Any) -> Any:
    """A tool observation's input: the arguments, which some SDKs wrap in ``input``.
    LangGraph writes them as a Python dict's repr; that stays text."""
    if isinstance(value, dict) and set(value) == {"input"}:
        return value["input"]
    return value


def _score(score: dict[str, Any]) -> dict[str, Any]:
    return {
        key: score[key]
        for key in ("name", "value", "stringValue", "source", "dataType", "comment")
        if key in score
    }
