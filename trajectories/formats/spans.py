"""Trace trees to steps: what the span formats (``otel``, ``langfuse``, ``langsmith``)
share once each has read its own file into :class:`Span` records.

A trace is a tree of spans (model calls, tool executions, agent and chain runs). Each
span becomes one step, in time order, and the tree is kept on the steps' metadata:
``span_id``, ``parent_span_id`` and ``parent``, the index of the parent's step (absent on
roots). A parent always comes before its children, even when a child's clock says it
started a millisecond earlier, so ``parent`` is always smaller than the step's index.

What is labelable follows the chat formats: a model call is the agent's decision, so it
is labelable; a tool execution is the environment's answer, so it is not; an agent span
is labelable only when it has output text and no model call below it (when the model
calls are there, they are what to label, and the agent's output repeats the last of
them). Chains and other spans are the program's structure, not a decision.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from trajectories.formats.base import FieldError, ParsedStep, tool_call_step
from trajectories.formats.chat_content import decode, first_user_text, output_text_and_calls

LLM = "llm"
TOOL = "tool"
AGENT = "agent"
# Span kinds that are the model speaking; everything else is structure or environment.
MODEL_KINDS = (LLM,)
ISO_FRACTION = re.compile(r"(\.\d{6})\d+")


@dataclass
class Span:
    """One span as the span formats read it. Times are seconds since the epoch."""

    span_id: str
    parent_span_id: str
    kind: str  # llm, tool, agent, chain, embedding, retriever, span, ...
    name: str
    order: int  # position in the file, to keep ties stable
    start: float | None = None
    end: float | None = None
    input: Any = None
    output: Any = None
    model: str = ""
    agent: str = ""
    tool_name: str = ""
    tool_args: Any = None
    tokens: dict[str, int] = field(default_factory=dict)
    cost: float | None = None
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # The span as the file has it, kept as the trajectory's raw record.
    raw: Any = None


@dataclass
class Tree:
    """A trace's steps and what the trajectory says about them as a whole."""

    steps: list[ParsedStep]
    task: str
    model: str
    totals: dict[str, Any]


def build(spans: list[Span]) -> Tree:
    """The steps of one trace, parents first and otherwise in order of start time."""
    by_id = {span.span_id: span for span in spans}
    children: dict[str, list[Span]] = {}
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in by_id else ""
        children.setdefault(parent, []).append(span)
    ordered = _time_order(children)
    has_model_below = _model_below(spans, by_id)

    index_of: dict[str, int] = {}
    agents: dict[str, str] = {}
    steps: list[ParsedStep] = []
    for depth, span in ordered:
        parent_agent = agents.get(span.parent_span_id, "")
        agent = span.agent or (span.name if span.kind == AGENT else parent_agent)
        agents[span.span_id] = agent
        step = _step(span, agent, labelable_container=not has_model_below[span.span_id])
        step.metadata.update(_span_metadata(span, depth))
        if span.parent_span_id in index_of:
            step.metadata["parent"] = index_of[span.parent_span_id]
        index_of[span.span_id] = len(steps)
        steps.append(step)

    spans_in_order = [span for _, span in ordered]
    return Tree(
        steps=steps,
        task=_task(spans_in_order),
        model=_model(spans_in_order),
        totals=_totals(spans_in_order),
    )


def _time_order(children: dict[str, list[Span]]) -> list[tuple[int, Span]]:
    """(depth, span) pairs: each span's start is taken as at least its parent's, then
    all spans sorted by that start, depth and file order."""
    keyed: list[tuple[float, int, int, Span]] = []
    pending: list[tuple[str, float, int]] = [("", -math.inf, 0)]
    seen: set[str] = set()
    while pending:
        parent_id, parent_start, depth = pending.pop()
        for span in children.get(parent_id, []):
            if span.span_id in seen:
                continue  # a cycle of parent ids; the span is already placed
            seen.add(span.span_id)
            start = parent_start if span.start is None else max(span.start, parent_start)
            keyed.append((start, depth, span.order, span))
            pending.append((span.span_id, start, depth + 1))
    # Spans caught in a cycle of parent ids hang from no root; they become roots.
    for spans in children.values():
        for span in spans:
            if span.span_id not in seen:
                seen.add(span.span_id)
                keyed.append((span.start or -math.inf, 0, span.order, span))
                span.parent_span_id = ""
    keyed.sort(key=lambda item: item[:3])
    return [(depth, span) for _, depth, _, span in keyed]


def _model_below(spans: list[Span], by_id: dict[str, Span]) -> dict[str, bool]:
    below = {span.span_id: False for span in spans}
    for span in spans:
        if span.kind not in MODEL_KINDS:
            continue
        parent_id, hops = span.parent_span_id, 0
        while parent_id in by_id and hops < len(spans):
            below[parent_id] = True
            parent_id, hops = by_id[parent_id].parent_span_id, hops + 1
    return below


def _step(span: Span, agent: str, *, labelable_container: bool) -> ParsedStep:
    metadata: dict[str, Any] = {}
    if span.kind == LLM:
        text, calls = output_text_and_calls(span.output)
        if calls:
            metadata["tool_calls"] = calls
            return tool_call_step(
                content=text, calls=calls, metadata=metadata, errors=[], agent=agent
            )
        return ParsedStep(
            kind="message",
            role="assistant",
            content=text,
            labelable=True,
            agent=agent,
            metadata=metadata,
        )
    text, _ = output_text_and_calls(span.output)
    if span.kind == TOOL:
        return ParsedStep(
            kind="tool_result",
            role="tool",
            content=text or _as_text(span.output),
            labelable=False,
            agent=agent,
            tool_name=span.tool_name or span.name,
            tool_args=span.tool_args if span.tool_args is not None else decode(span.input),
            metadata=metadata,
        )
    return ParsedStep(
        kind="action",
        role=AGENT if span.kind == AGENT else span.kind,
        content=text,
        labelable=span.kind == AGENT and labelable_container and bool(text.strip()),
        agent=agent,
        metadata=metadata,
    )


def _span_metadata(span: Span, depth: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "span_kind": span.kind,
        "name": span.name,
        "depth": depth,
    }
    if span.start is not None:
        metadata["start"] = iso(span.start)
        if span.end is not None:
            metadata["duration_ms"] = round((span.end - span.start) * 1000, 3)
    if span.model:
        metadata["model"] = span.model
    if span.tokens:
        metadata["tokens"] = dict(span.tokens)
    if span.cost is not None:
        metadata["cost"] = span.cost
    if span.error:
        metadata["error"] = span.error
    metadata.update(span.extra)
    return metadata


def _task(spans: list[Span]) -> str:
    """The first user input of the first model call, else of any span."""
    for kinds in (MODEL_KINDS, None):
        for span in spans:
            if kinds is None or span.kind in kinds:
                text = first_user_text(span.input)
                if text.strip():
                    return text
    return ""


def _model(spans: list[Span]) -> str:
    models = Counter(span.model for span in spans if span.kind == LLM and span.model)
    return models.most_common(1)[0][0] if models else ""


def _totals(spans: list[Span]) -> dict[str, Any]:
    tokens: Counter[str] = Counter()
    cost = 0.0
    priced = False
    # Containers often repeat their model calls' usage; count the calls when they have it.
    counted = [span for span in spans if span.kind == LLM and span.tokens] or spans
    for span in counted:
        tokens.update(span.tokens)
    for span in spans:
        if span.cost is not None:
            cost += span.cost
            priced = True
    starts = [span.start for span in spans if span.start is not None]
    ends = [span.end for span in spans if span.end is not None]
    totals: dict[str, Any] = {
        "spans": len(spans),
        "llm_calls": sum(span.kind == LLM for span in spans),
        "tool_calls": sum(span.kind == TOOL for span in spans),
        "errors": sum(bool(span.error) for span in spans),
    }
    if tokens:
        totals["tokens"] = dict(tokens)
    if priced:
        totals["cost"] = round(cost, 10)
    if starts and ends:
        totals["duration_ms"] = round((max(ends) - min(starts)) * 1000, 3)
    return totals


# Values the span formats share


def seconds(value: Any, field_name: str) -> float | None:
    """A time as seconds since the epoch, from an ISO 8601 string, epoch seconds,
    milliseconds or nanoseconds (told apart by size), a nanosecond string (OTLP), or an
    OpenTelemetry-JS ``[seconds, nanoseconds]`` pair. None stays None."""
    if value is None:
        return None
    if isinstance(value, list) and len(value) == 2 and all(_is_number(v) for v in value):
        return _datable(float(value[0]) + float(value[1]) / 1e9, value, field_name)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if _is_number(value):
        number = float(value)
        # Below 1e11 is seconds (until the year 5138), below 1e14 milliseconds, else ns.
        if number < 1e11:
            return _datable(number, value, field_name)
        if number < 1e14:
            return _datable(number / 1e3, value, field_name)
        return _datable(number / 1e9, value, field_name)
    if isinstance(value, str):
        text = ISO_FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00")
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise FieldError(field_name, f"is {value[:40]!r}, not a time") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    raise FieldError(field_name, f"expected a time, got {type(value).__name__}")


# 9999-12-31T23:59:59Z in seconds since the epoch. A datetime holds no later second, and
# the last one is left out so that rounding to microseconds cannot reach the year 10000.
_LAST_DATABLE = 253402300799.0


def _datable(moment: float, value: Any, field_name: str) -> float:
    """``moment`` when a date can be made of it (from the epoch to the year 9999), which
    the steps' metadata does (:func:`iso`); otherwise the field is not a time."""
    if not math.isfinite(moment) or not 0 <= moment < _LAST_DATABLE:
        raise FieldError(field_name, f"is {value!r}, not a time")
    return moment


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


def count(value: Any) -> int | None:
    """A token count: an integer, a float with no fraction, or digits in a string
    (OTel-JS writes some attributes as strings)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def money(value: Any) -> float | None:
    if isinstance(value, bool) or not _is_number(value):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_text(value: Any) -> str:
    """A tool's output as text: strings as they are, other JSON written out."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def depth_below(steps: list[ParsedStep], step: ParsedStep) -> int:
    """How deep ``step`` hangs in its trajectory's tree, from its ``parent`` (an index into
    ``steps``, the steps before it): 0 for a root. The trajectory page indents by it."""
    parent = step.metadata.get("parent")
    if not isinstance(parent, int) or not 0 <= parent < len(steps):
        return 0
    return int(steps[parent].metadata.get("depth", 0)) + 1
