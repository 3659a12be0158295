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
import sys
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


@dataclass(slots=True)
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
    # What :func:`extend` needs to add later spans: the summary folded over the steps,
    # the last step's start as ordered (-inf when it has none), and the parent ids the
    # spans name but the trace lacks.
    summary: Summary
    last_start: float
    absent: set[str]


@dataclass
class Summary:
    """The task, model and totals of a trace, folded span by span in step order (a
    live trace carries it from one assembly to the next, as JSON)."""

    task: str = ""
    task_from_model: bool = False
    # [model, calls], in the order the models first appear (the first wins a tie).
    models: list[list[Any]] = field(default_factory=list)
    spans: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    errors: int = 0
    # Token counts of the model calls that report them; those of every span count
    # only when no model call does (containers often repeat their calls' usage).
    llm_tokens: dict[str, int] = field(default_factory=dict)
    llm_tokens_seen: bool = False
    all_tokens: dict[str, int] = field(default_factory=dict)
    cost: float = 0.0
    priced: bool = False
    first_start: float | None = None
    last_end: float | None = None

    def add(self, span: Span) -> None:
        # The task: the first user input of the first model call, else of any span.
        if not self.task_from_model and (span.kind in MODEL_KINDS or not self.task):
            text = first_user_text(span.input)
            if text.strip():
                self.task = text
                self.task_from_model = span.kind in MODEL_KINDS
        if span.kind == LLM and span.model:
            for pair in self.models:
                if pair[0] == span.model:
                    pair[1] += 1
                    break
            else:
                self.models.append([span.model, 1])
        self.spans += 1
        self.llm_calls += span.kind == LLM
        self.tool_calls += span.kind == TOOL
        self.errors += bool(span.error)
        if span.kind == LLM and span.tokens:
            self.llm_tokens_seen = True
            _count_into(self.llm_tokens, span.tokens)
        _count_into(self.all_tokens, span.tokens)
        if span.cost is not None:
            self.cost += span.cost
            self.priced = True
        if span.start is not None:
            first = self.first_start
            self.first_start = span.start if first is None else min(span.start, first)
        if span.end is not None:
            last = self.last_end
            self.last_end = span.end if last is None else max(span.end, last)

    @property
    def model(self) -> str:
        best: list[Any] = ["", 0]
        for pair in self.models:
            if pair[1] > best[1]:
                best = pair
        return str(best[0])

    @property
    def totals(self) -> dict[str, Any]:
        totals: dict[str, Any] = {
            "spans": self.spans,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "errors": self.errors,
        }
        tokens = self.llm_tokens if self.llm_tokens_seen else self.all_tokens
        if tokens:
            totals["tokens"] = dict(tokens)
        if self.priced:
            totals["cost"] = round(self.cost, 10)
        if self.first_start is not None and self.last_end is not None:
            totals["duration_ms"] = round((self.last_end - self.first_start) * 1000, 3)
        return totals

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Summary:
        return cls(**value)


def _count_into(counts: dict[str, int], more: dict[str, int]) -> None:
    for key, value in more.items():
        counts[key] = counts.get(key, 0) + value


def build(spans: list[Span]) -> Tree:
    """The steps of one trace, parents first and otherwise in order of start time."""
    order = order_of(spans)
    steps = steps_in_order(order.ordered, order.has_model_below, {}, {}, 0)
    summary = Summary()
    for _, _, span in order.ordered:
        summary.add(span)
    return Tree(
        steps=steps,
        task=summary.task,
        model=summary.model,
        totals=summary.totals,
        summary=summary,
        last_start=order.last_start,
        absent=order.absent,
    )


@dataclass
class Order:
    """Where each span of a trace goes: (start, depth, span) in step order, which spans
    have a model call below them, and the parent ids the spans name but lack. It reads
    only the spans' ids, parents, kinds and times, so a trace too large to hold whole
    can be ordered from its spans' skeletons (:func:`skeleton`)."""

    ordered: list[tuple[float, int, Span]]
    # The ids of the spans with a model call somewhere below them.
    has_model_below: set[str]
    absent: set[str]

    @property
    def last_start(self) -> float:
        return self.ordered[-1][0] if self.ordered else -math.inf


def order_of(spans: list[Span]) -> Order:
    by_id = {span.span_id: span for span in spans}
    children: dict[str, list[Span]] = {}
    absent: set[str] = set()
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in by_id else ""
        if span.parent_span_id and not parent:
            absent.add(span.parent_span_id)
        children.setdefault(parent, []).append(span)
    ordered = _time_order(children)
    return Order(ordered=ordered, has_model_below=_model_below(spans, by_id), absent=absent)


def skeleton(span: Span) -> Span:
    """The span without its texts (input, output, arguments, extra attributes), its
    token counts, cost and end: what :func:`order_of` and :meth:`Summary.add` read, but
    the task (its ``input`` is only True where the span's could be the task:
    :func:`task_source`) and the sums that need no order (tokens, cost, last end: add
    the whole span to a summary of its own). The short texts that repeat from span to
    span are interned: a trace of 100,000 spans keeps one copy of each."""
    return Span(
        span_id=span.span_id,
        parent_span_id=sys.intern(span.parent_span_id),
        kind=sys.intern(span.kind),
        name=sys.intern(span.name),
        order=span.order,
        start=span.start,
        input=True if first_user_text(span.input).strip() else None,
        model=sys.intern(span.model),
        agent=sys.intern(span.agent),
        error="error" if span.error else "",
    )


def task_source(ordered: list[tuple[float, int, Span]]) -> Span | None:
    """The skeleton whose span's input :meth:`Summary.add` takes as the task: the first
    model call's that has one, else the first span's."""
    first = None
    for _, _, span in ordered:
        if span.input is not True:
            continue
        if span.kind in MODEL_KINDS:
            return span
        first = first or span
    return first


@dataclass(frozen=True)
class Placed:
    """A step already built that new spans hang from."""

    index: int
    depth: int
    agent: str


@dataclass
class Extension:
    """The steps :func:`extend` adds, and what changes for the steps before them."""

    steps: list[ParsedStep]
    last_start: float
    # Placed steps that now have a model call below them (by span id): an agent span
    # among them or their ancestors is no longer labelable.
    model_below: set[str]
    # Parent ids the new spans name and the trace lacks.
    absent: set[str]


def extend(
    spans: list[Span],
    *,
    placed: dict[str, Placed],
    after: float,
    absent: set[str],
    first_index: int,
    summary: Summary,
) -> Extension | None:
    """The steps of ``spans``, later spans of a trace whose first ``first_index`` steps
    are built, when they simply follow those steps: the steps :func:`build` gives for
    all the spans are then the earlier ones, unchanged, and these. ``placed`` holds the
    earlier steps the new spans name as parents, ``after`` the last earlier step's start
    as ordered, ``absent`` the parents the earlier spans named and lacked; the new
    spans are added to ``summary``.

    None when the new spans do not simply follow: one is the missing parent of an
    earlier span (the tree changes), one starts no later than ``after`` (the order
    changes), or they hang in a cycle. The caller then builds the trace again."""
    ids = {span.span_id for span in spans}
    if not ids.isdisjoint(absent):
        return None
    children: dict[str, list[Span]] = {}
    new_absent: set[str] = set()
    for span in spans:
        parent = span.parent_span_id
        if parent not in ids:
            if span.start is None and not (first_index == 0 and after == -math.inf):
                return None
            if span.start is not None and not span.start > after:
                return None
            if parent not in placed:
                if parent:
                    new_absent.add(parent)
                parent = ""
        children.setdefault(parent, []).append(span)
    seeds = [("", -math.inf, 0)] + [
        (parent, -math.inf, placed[parent].depth + 1) for parent in children if parent in placed
    ]
    keyed, seen = _walk(children, seeds)
    if len(seen) < len(spans):
        return None  # a cycle of parent ids among the new spans
    keyed.sort(key=lambda item: item[:3])
    ordered = [(start, depth, span) for start, depth, _, span in keyed]
    by_id = {span.span_id: span for span in spans}
    has_model_below = _model_below(spans, by_id)
    model_below: set[str] = set()
    for span in spans:
        if span.kind not in MODEL_KINDS:
            continue
        parent_id, hops = span.parent_span_id, 0
        while parent_id in by_id and hops < len(spans):
            parent_id, hops = by_id[parent_id].parent_span_id, hops + 1
        if parent_id in placed:
            model_below.add(parent_id)
    index_of = {span_id: step.index for span_id, step in placed.items()}
    agents = {span_id: step.agent for span_id, step in placed.items()}
    for _, _, span in ordered:
        summary.add(span)
    return Extension(
        steps=steps_in_order(ordered, has_model_below, index_of, agents, first_index),
        last_start=ordered[-1][0] if ordered else after,
        model_below=model_below,
        absent=new_absent,
    )


def steps_in_order(
    ordered: list[tuple[float, int, Span]],
    has_model_below: set[str],
    index_of: dict[str, int],
    agents: dict[str, str],
    first_index: int,
) -> list[ParsedStep]:
    """One step per span, in order; ``index_of`` and ``agents`` hold the steps already
    built (the spans' parents among them), and gain these."""
    steps: list[ParsedStep] = []
    for _, depth, span in ordered:
        parent_agent = agents.get(span.parent_span_id, "")
        agent = span.agent or (span.name if span.kind == AGENT else parent_agent)
        agents[span.span_id] = agent
        step = _step(span, agent, labelable_container=span.span_id not in has_model_below)
        step.metadata.update(_span_metadata(span, depth))
        if span.parent_span_id in index_of:
            step.metadata["parent"] = index_of[span.parent_span_id]
        index_of[span.span_id] = first_index + len(steps)
        steps.append(step)
    return steps


def _walk(
    children: dict[str, list[Span]], seeds: list[tuple[str, float, int]]
) -> tuple[list[tuple[float, int, int, Span]], set[str]]:
    """(start, depth, order, span) of each span below the seeds (parent id, its start,
    its children's depth): a span's start is taken as at least its parent's."""
    keyed: list[tuple[float, int, int, Span]] = []
    pending = list(seeds)
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
    return keyed, seen


def _time_order(children: dict[str, list[Span]]) -> list[tuple[float, int, Span]]:
    """(start, depth, span) triples: each span's start is taken as at least its
    parent's, then all spans sorted by that start, depth and file order."""
    keyed, seen = _walk(children, [("", -math.inf, 0)])
    # Spans caught in a cycle of parent ids hang from no root; they become roots.
    for spans in children.values():
        for span in spans:
            if span.span_id not in seen:
                seen.add(span.span_id)
                keyed.append((span.start or -math.inf, 0, span.order, span))
                span.parent_span_id = ""
    keyed.sort(key=lambda item: item[:3])
    # In place: a trace of 100,000 spans never holds both lists.
    ordered: list[Any] = keyed
    for n, (start, depth, _, span) in enumerate(keyed):
        ordered[n] = (start, depth, span)
    return ordered


def _model_below(spans: list[Span], by_id: dict[str, Span]) -> set[str]:
    below: set[str] = set()
    for span in spans:
        if span.kind not in MODEL_KINDS:
            continue
        parent_id, hops = span.parent_span_id, 0
        # A parent in ``below`` already has its ancestors there too.
        while parent_id in by_id and parent_id not in below and hops < len(spans):
            below.add(parent_id)
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
