"""Monte Carlo step labels, the OmegaPRM-style first-error search and the critical-step
decision, on plain numbers (no Django, no torch).

A step's Monte Carlo value is read from k continuations of the prefix that ends at it:
the **soft** estimate is the fraction that reach the right answer, the **hard** estimate
says whether any does (Math-Shepherd's two estimators).

The first-error search (Luo et al., 2024, "OmegaPRM") assumes a failed trajectory and
finds the first step after which the policy can no longer succeed, by binary search over
the candidate steps: a probe rolls out k continuations after step ``mid``; if any
succeeds the error is later, else it is at ``mid`` or earlier. It spends
``k * ceil(log2(n))`` rollouts where labelling every step spends ``k * n``.
"""

# Django-free: Monte Carlo labels and searches on plain data.
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class MCEstimate:
    k: int
    successes: int

    @property
    def soft(self) -> float:
        return self.successes / self.k if self.k else 0.0

    @property
    def hard(self) -> bool:
        return self.successes > 0

    def label(self, *, threshold: float | None = None) -> int:
        """+1 good or -1 bad: the hard estimate, or the soft one against ``threshold``."""
        good = self.hard if threshold is None else self.soft >= threshold
        return 1 if good else -1


def mc_estimate(outcomes: list[bool]) -> MCEstimate:
    return MCEstimate(k=len(outcomes), successes=sum(1 for o in outcomes if o))


@dataclass
class FirstErrorSearch:
    """The state of one binary search, kept as plain data between probes (a job stores
    it as JSON and advances it as each probe's continuations come back).

    ``candidates`` are the step indices the search may name (labelable steps, in order).
    Invariant: the step at ``candidates[hi]`` is known (or, for the last one, assumed
    from the failed outcome) to leave no way to succeed; every candidate before ``lo``
    is known to leave one.
    """

    candidates: list[int]
    lo: int = 0
    hi: int = -1
    # (step index, successes, k) for each probe, in order.
    probes: list[tuple[int, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.hi < 0:
            self.hi = len(self.candidates) - 1

    @property
    def finished(self) -> bool:
        return self.lo >= self.hi

    @property
    def first_error(self) -> int | None:
        """The step index found, once finished; None for an empty search."""
        if not self.candidates or not self.finished:
            return None
        return self.candidates[self.lo]

    @property
    def rollouts(self) -> int:
        return sum(k for _, _, k in self.probes)

    def next_probe(self) -> int | None:
        """The step to roll out from next, or None when the search is over."""
        if self.finished:
            return None
        return self.candidates[(self.lo + self.hi) // 2]

    def record(self, step: int, successes: int, k: int) -> None:
        """Advance with the result of the probe at ``step``."""
        mid = (self.lo + self.hi) // 2
        if self.finished or self.candidates[mid] != step:
            raise ValueError(f"step {step} is not the probe this search is waiting for")
        self.probes.append((step, successes, k))
        if successes > 0:
            self.lo = mid + 1
        else:
            self.hi = mid

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": self.candidates,
            "lo": self.lo,
            "hi": self.hi,
            "probes": [list(p) for p in self.probes],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FirstErrorSearch:
        return cls(
            candidates=list(data["candidates"]),
            lo=data["lo"],
            hi=data["hi"],
            probes=[(int(s), int(n), int(k)) for s, n, k in data["probes"]],
        )


def search_probes_bound(candidates: int) -> int:
    """Most probes a search over ``candidates`` steps can take: ceil(log2(n))."""
    return math.ceil(math.log2(candidates)) if candidates > 1 else 0


@dataclass(frozen=True)
class CriticalVerdict:
    """A step replaced by an alternative, then continued k times. The step is critical
    when the outcome flips: the trajectory failed and most continuations of the
    alternative succeed, or it succeeded and most fail."""

    baseline_success: bool
    alternative: MCEstimate
    threshold: float = 0.5

    @property
    def alternative_success(self) -> bool:
        return self.alternative.soft >= self.threshold

    @property
    def critical(self) -> bool:
        return self.alternative_success != self.baseline_success
