"""Train/test splits by task (no Django).

A split spec such as ``"train=0.9,test=0.1"`` names the splits and their shares. A task
falls in a split by a hash of the seed and its group key alone, so the assignment is the
same on every run and every machine, does not depend on what else is exported, and a
task (every rollout of it) never lands in two splits. Shares are met in expectation,
not exactly: with few tasks a split can come out larger or smaller, or empty.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Shares may be written with a few decimals (0.333,0.333,0.334); they must add up to 1
# within this tolerance.
SUM_TOLERANCE = 1e-6


class SplitSpecError(ValueError):
    """A split spec that cannot be used, with a message saying why."""


@dataclass(frozen=True)
class SplitSpec:
    parts: tuple[tuple[str, float], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.parts)

    def __str__(self) -> str:
        return ",".join(f"{name}={share:g}" for name, share in self.parts)


def parse_split_spec(text: str) -> SplitSpec:
    """``"name=share,name=share,..."``: names of letters, digits, ``_`` and ``-`` (they
    become part of file names), each once; shares above 0 that add up to 1."""
    if not isinstance(text, str) or not text.strip():
        raise SplitSpecError("split spec is empty; expected e.g. train=0.9,test=0.1")
    parts: list[tuple[str, float]] = []
    for item in text.split(","):
        item = item.strip()
        name, equals, share_text = item.partition("=")
        name, share_text = name.strip(), share_text.strip()
        if not equals or not name or not share_text:
            raise SplitSpecError(f"split {item!r}: expected name=share, e.g. train=0.9")
        if not SPLIT_NAME.fullmatch(name):
            raise SplitSpecError(
                f"split name {name!r}: use letters, digits, '_' and '-', starting with a "
                "letter or digit"
            )
        if name in (seen for seen, _ in parts):
            raise SplitSpecError(f"split name {name!r} appears twice")
        try:
            share = float(share_text)
        except ValueError:
            raise SplitSpecError(f"split {name!r}: share {share_text!r} is not a number") from None
        if not math.isfinite(share) or not 0 < share <= 1:
            raise SplitSpecError(
                f"split {name!r}: share {share_text} must be above 0 and at most 1"
            )
        parts.append((name, share))
    total = math.fsum(share for _, share in parts)
    if abs(total - 1) > SUM_TOLERANCE:
        raise SplitSpecError(f"split shares add up to {total:g}; they must add up to 1")
    return SplitSpec(tuple(parts))


def split_point(key: str, seed: int) -> float:
    """Where ``key`` falls in [0, 1) for ``seed``: the first 8 bytes of a SHA-256."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SplitSpecError(f"seed is {seed!r}; expected an integer")
    digest = hashlib.sha256(
        b"stepscope-split\x00" + str(seed).encode() + b"\x00" + key.encode("utf-8", "surrogatepass")
    ).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def split_for(key: str, spec: SplitSpec, seed: int) -> str:
    """The split the task with group key ``key`` falls in."""
    point = split_point(key, seed)
    total = math.fsum(share for _, share in spec.parts)
    bound = 0.0
    for name, share in spec.parts[:-1]:
        bound += share / total
        if point < bound:
            return name
    return spec.parts[-1][0]
