"""A task's rollouts as a prefix tree for display (no Django).

Rollouts merge where their steps are identical (same prefix hash). Each node carries the
Monte Carlo value from :func:`metrics.montecarlo.mc_prefix`. For display, runs of nodes
that do not branch are folded into one *segment*, so a tree of long rollouts stays
readable: a segment is a path of nodes that neither branch nor end a rollout, so every
rollout through its first node follows it to its last.
"""

# Django-free: plain data in, plain data out.
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from metrics.montecarlo import mc_prefix

# A branch point "splits" outcomes when its children's values differ at least this much.
SPLIT_GAP = 0.5


@dataclass
class Segment:
    nodes: list[int]  # node ids along the segment, root-most first
    depth: int  # segments above this one
    start_index: int  # step index of the first node
    visits: int
    value: float  # MC value at the segment's last node
    lower: float
    upper: float
    advantage: float  # value change from the parent segment's end to this segment's end
    rollout: int  # a rollout passing through (position in the input), for links
    children: list[int] = field(default_factory=list)  # child segment positions
    splits_outcomes: bool = False  # the branch at the end separates successes from failures

    @property
    def length(self) -> int:
        return len(self.nodes)


def segments(rollouts: Sequence[Sequence[str]], outcomes: Sequence[float]) -> list[Segment]:
    """Segments in depth-first order (children follow their parent)."""
    tree = mc_prefix(rollouts, outcomes)
    count = len(tree.hashes)
    children: list[list[int]] = [[] for _ in range(count)]
    roots: list[int] = []
    for node in range(count):
        parent = int(tree.parent[node])
        (roots if parent < 0 else children[parent]).append(node)
    # A rollout through each node, for linking to its steps, and the nodes where a
    # rollout ends (a rollout that is a prefix of another, as a continuation's source is).
    through = [0] * count
    seen = [False] * count
    ends = [False] * count
    for rollout in range(len(rollouts)):
        start, end = int(tree.offsets[rollout]), int(tree.offsets[rollout + 1])
        for flat in range(start, end):
            node = int(tree.step_node[flat])
            if not seen[node]:
                seen[node], through[node] = True, rollout
        if end > start:
            ends[int(tree.step_node[end - 1])] = True

    out: list[Segment] = []

    def walk(first: int, depth: int, parent_value: float) -> int:
        path = [first]
        while len(children[path[-1]]) == 1 and not ends[path[-1]]:
            path.append(children[path[-1]][0])
        last = path[-1]
        position = len(out)
        segment = Segment(
            nodes=path,
            depth=depth,
            start_index=int(tree.depth[first]),
            visits=int(tree.visits[first]),
            value=float(tree.value[last]),
            lower=float(tree.lower[last]),
            upper=float(tree.upper[last]),
            advantage=float(tree.value[last]) - parent_value,
            rollout=through[first],
        )
        out.append(segment)
        kids = children[last]
        if len(kids) > 1:
            values = [float(tree.value[k]) for k in kids]
            segment.splits_outcomes = max(values) - min(values) >= SPLIT_GAP
        for kid in kids:
            segment.children.append(walk(kid, depth + 1, segment.value))
        return position

    for root in roots:
        walk(root, 0, tree.root_value)
    return out
