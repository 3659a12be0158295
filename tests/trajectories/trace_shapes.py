"""What the trace-format tests measure on a parsed file: trajectories, steps, labelable
steps, tree roots, the deepest step and the tools called."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from trajectories.formats.base import ParsedStep, ParsedTrajectory, ParseResult

REALDATA = Path(__file__).resolve().parents[2].parent / "shared" / "realdata"


def trajectories(results: Iterable[ParseResult]) -> list[ParsedTrajectory]:
    parsed = list(results)
    assert all(isinstance(result, ParsedTrajectory) for result in parsed), parsed
    return [result for result in parsed if isinstance(result, ParsedTrajectory)]


def depth(steps: list[ParsedStep], index: int) -> int:
    found = 0
    while "parent" in steps[index].metadata:
        parent = steps[index].metadata["parent"]
        assert parent < index, "a parent step comes before its children"
        index = parent
        found += 1
    return found


def shape(parsed: list[ParsedTrajectory]) -> tuple[int, int, int, int, int, dict[str, int]]:
    steps = [step for trajectory in parsed for step in trajectory.steps]
    # The depth each step carries (the trajectory page indents by it) is its parent
    # chain's length.
    stored = [
        (t.steps[i].metadata.get("depth"), depth(t.steps, i))
        for t in parsed
        for i in range(len(t.steps))
    ]
    assert [got for got, _ in stored] == [want for _, want in stored]
    return (
        len(parsed),
        len(steps),
        sum(step.labelable for step in steps),
        sum("parent" not in step.metadata for step in steps),
        max(depth(t.steps, i) for t in parsed for i in range(len(t.steps))),
        dict(Counter(step.tool_name for step in steps if step.kind == "tool_call")),
    )
