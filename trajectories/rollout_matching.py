"""Matching two rollouts of one task step by step (no Django).

Rollouts that share a prefix share prefix hashes, so the common prefix is found exactly;
after the divergence step the rest is matched by a sequence match on a key per step
(tool name and arguments for tool calls, else the normalised text), so that the same
action taken at different positions still lines up.
"""

# Django-free: plain data in, plain data out.
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class MatchStep:
    index: int
    prefix_hash: str
    role: str
    content: str
    tool_name: str = ""
    tool_args: Any = None


@dataclass(frozen=True)
class MatchedRow:
    """One row of a side-by-side view: a step from each side, or a gap (None)."""

    left: int | None
    right: int | None
    kind: str  # "shared" (identical prefix), "same", "changed", "left-only", "right-only"


@dataclass(frozen=True)
class Matching:
    shared_prefix: int  # steps 0..shared_prefix-1 are identical on both sides
    divergence: int | None  # the first index where the two differ; None if identical
    rows: list[MatchedRow]


def step_key(step: MatchStep) -> str:
    if step.tool_name:
        args = json.dumps(step.tool_args, sort_keys=True, ensure_ascii=False)
        return f"{step.role}|tool|{step.tool_name}|{args}"
    return f"{step.role}|text|{_SPACE.sub(' ', step.content.strip().lower())}"


def rollouts_match(left: Sequence[MatchStep], right: Sequence[MatchStep]) -> Matching:
    shared = 0
    while (
        shared < len(left)
        and shared < len(right)
        and left[shared].prefix_hash == right[shared].prefix_hash
    ):
        shared += 1
    rows = [MatchedRow(i, i, "shared") for i in range(shared)]
    rest_left = [step_key(s) for s in left[shared:]]
    rest_right = [step_key(s) for s in right[shared:]]
    matcher = difflib.SequenceMatcher(a=rest_left, b=rest_right, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            rows += [MatchedRow(shared + a0 + k, shared + b0 + k, "same") for k in range(a1 - a0)]
            continue
        pairs = max(a1 - a0, b1 - b0)
        for k in range(pairs):
            li = shared + a0 + k if a0 + k < a1 else None
            ri = shared + b0 + k if b0 + k < b1 else None
            kind = (
                "changed"
                if li is not None and ri is not None
                else ("left-only" if ri is None else "right-only")
            )
            rows.append(MatchedRow(li, ri, kind))
    identical = shared == len(left) == len(right)
    return Matching(shared_prefix=shared, divergence=None if identical else shared, rows=rows)
