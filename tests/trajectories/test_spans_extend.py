"""Spans that arrive in pieces (``spans.extend``): adding each piece's steps after the
steps built so far, and building again only where ``extend`` refuses, must give the very
steps, task, model and totals that building the whole trace at once gives."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest

from trajectories.formats import spans as span_tree
from trajectories.formats.base import ParsedStep
from trajectories.formats.spans import Placed, Span, Summary
from trajectories.hashing import prefix_hashes

KINDS = ("llm", "tool", "agent", "chain", "llm", "tool")


def random_trace(rng: random.Random, size: int) -> list[Span]:
    """A tree of ``size`` spans: model calls, tools, agents and chains, children
    starting after their parent (a few before it, a few with no start), some with a
    parent that never arrives."""
    spans: list[Span] = []
    clock = 1_760_000_000.0
    for n in range(size):
        parent = ""
        if n and rng.random() < 0.9:
            parent = spans[rng.randrange(n)].span_id
        elif n and rng.random() < 0.5:
            parent = f"missing{n}"
        kind = KINDS[rng.randrange(len(KINDS))] if n else "agent"
        clock += rng.random()
        start: float | None = clock if rng.random() > 0.05 else None
        if start is not None and rng.random() < 0.05:
            start -= 5.0
        message = [{"role": "user", "content": f"question {rng.randrange(3)}"}]
        spans.append(
            Span(
                span_id=f"s{n}",
                parent_span_id=parent,
                kind=kind,
                name=f"{kind}-{rng.randrange(3)}",
                order=0,
                start=start,
                end=None if start is None else start + rng.random(),
                input=message if rng.random() < 0.6 else None,
                output=f"out {n}" if rng.random() < 0.7 else None,
                model=f"model-{rng.randrange(2)}" if kind == "llm" else "",
                tokens={"prompt": rng.randrange(9)} if rng.random() < 0.5 else {},
                cost=rng.random() if rng.random() < 0.3 else None,
                error="boom" if rng.random() < 0.1 else "",
            )
        )
    return spans


@dataclass
class Assembled:
    """What the live assembler keeps between pieces, as plain data."""

    steps: list[ParsedStep] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
    last_start: float = -math.inf
    absent: set[str] = field(default_factory=set)
    received: list[Span] = field(default_factory=list)
    rebuilt: int = 0


def receive(state: Assembled, piece: list[Span]) -> None:
    """Add ``piece`` as the assembler does: extend, or build everything again."""
    for span in piece:
        span.order = len(state.received)
        state.received.append(span)
    by_span = {step.metadata["span_id"]: (i, step) for i, step in enumerate(state.steps)}
    placed = {
        span.parent_span_id: Placed(
            index=by_span[span.parent_span_id][0],
            depth=by_span[span.parent_span_id][1].metadata["depth"],
            agent=by_span[span.parent_span_id][1].agent,
        )
        for span in piece
        if span.parent_span_id in by_span
    }
    summary = copy.deepcopy(state.summary)
    task_before = summary.task
    extension = span_tree.extend(
        copy.deepcopy(piece),
        placed=placed,
        after=state.last_start,
        absent=state.absent,
        first_index=len(state.steps),
        summary=summary,
    )
    if extension is None or (state.steps and summary.task != task_before):
        tree = span_tree.build(copy.deepcopy(state.received))
        state.steps, state.summary = tree.steps, tree.summary
        state.last_start, state.absent = tree.last_start, tree.absent
        state.hashes = prefix_hashes(tree.task, tree.steps)
        state.rebuilt += 1
        return
    # A model call below placed steps: an agent span above it is no longer labelable.
    for span_id in extension.model_below:
        index: Any = by_span[span_id][0]
        while isinstance(index, int):
            step = state.steps[index]
            if step.metadata["span_kind"] == "agent":
                step.labelable = False
            index = step.metadata.get("parent")
    state.hashes += prefix_hashes(
        summary.task, extension.steps, state.hashes[-1] if state.hashes else ""
    )
    state.steps += extension.steps
    state.summary = summary
    state.last_start = extension.last_start
    state.absent |= extension.absent


def pieces(rng: random.Random, spans: list[Span], in_order: bool) -> list[list[Span]]:
    order = list(spans)
    if not in_order:
        rng.shuffle(order)
    cuts = sorted(rng.sample(range(1, len(order)), k=min(len(order) - 1, rng.randrange(1, 8))))
    return [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)], strict=True)]


def same(state: Assembled) -> None:
    whole = span_tree.build(copy.deepcopy(state.received))
    assert [asdict(step) for step in state.steps] == [asdict(step) for step in whole.steps]
    assert state.hashes == prefix_hashes(whole.task, whole.steps)
    assert (state.summary.task, state.summary.model, state.summary.totals) == (
        whole.task,
        whole.model,
        whole.totals,
    )


@pytest.mark.parametrize("seed", range(60))
def test_pieces_in_any_order_give_the_whole_trace(seed: int) -> None:
    rng = random.Random(seed)
    trace = random_trace(rng, rng.randrange(2, 40))
    state = Assembled()
    for piece in pieces(rng, trace, in_order=False):
        receive(state, piece)
        same(state)


@pytest.mark.parametrize("seed", range(20))
def test_pieces_in_time_order_are_only_appended(seed: int) -> None:
    """Spans that come parents first and in time order (a trainer's or a streaming
    agent's) never make the trace be built again."""
    rng = random.Random(seed)
    trace = [
        Span(
            span_id=f"s{n}",
            parent_span_id="" if n == 0 else f"s{rng.randrange(n)}",
            kind=KINDS[n % len(KINDS)] if n else "agent",
            name="x",
            order=0,
            start=1_760_000_000.0 + n,
            end=1_760_000_000.5 + n,
            input=[{"role": "user", "content": "q"}],
            output=f"out {n}",
            model="m",
        )
        for n in range(rng.randrange(5, 60))
    ]
    state = Assembled()
    for piece in pieces(rng, trace, in_order=True):
        receive(state, piece)
        same(state)
    assert state.rebuilt == 0


def test_a_late_parent_makes_the_trace_be_built_again() -> None:
    """OpenTelemetry exports a span when it ends, so a root comes after its children:
    it adopts them (they were roots), which ``extend`` refuses."""
    child = Span("c", "r", "llm", "call", 0, start=2.0, end=3.0, output="hi", model="m")
    root = Span("r", "", "agent", "agent", 1, start=1.0, end=4.0, output="done")
    state = Assembled()
    receive(state, [child])
    assert state.absent == {"r"}
    receive(state, [root])
    assert state.rebuilt == 1
    same(state)
    assert [step.metadata["span_id"] for step in state.steps] == ["r", "c"]
    assert state.steps[0].labelable is False  # a model call below the agent
