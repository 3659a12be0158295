"""Agreement on decisive failures (the Who&When task: which agent, at which step,
decided that a run failed), one row per trajectory both sides judged: agent accuracy,
decisive-step accuracy (the exact step, and within ``k`` steps), each with its counts
and a percentile bootstrap interval over the trajectories."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

RESAMPLES = 2000
LEVEL = 0.95
# Resamples drawn at a time, so memory stays bounded for many trajectories.
BLOCK_CELLS = 4_000_000


@dataclass(frozen=True)
class Rate:
    """``correct`` of ``total``, and the bootstrap interval of the share (NaN: none)."""

    correct: int
    total: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.correct / self.total if self.total else math.nan

    def as_json(self) -> dict[str, Any]:
        def number(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {
            "correct": self.correct,
            "total": self.total,
            "value": number(self.value),
            "low": number(self.low),
            "high": number(self.high),
        }


def bootstrap_interval(
    hits: NDArray[np.bool_], *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of ``hits`` (seeded, so the page
    shows the same interval each time); NaN for no hits."""
    n = int(hits.size)
    if n == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    values = hits.astype(np.float64)
    means = np.empty(resamples, dtype=np.float64)
    block = max(1, BLOCK_CELLS // n)
    for start in range(0, resamples, block):
        count = min(block, resamples - start)
        picks = rng.integers(0, n, size=(count, n))
        means[start : start + count] = values[picks].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def rate(hits: NDArray[np.bool_], *, seed: int = 0) -> Rate:
    low, high = bootstrap_interval(hits, seed=seed)
    return Rate(int(hits.sum()), int(hits.size), low, high)


@dataclass(frozen=True)
class DecisiveAgreement:
    trajectories: int
    k: int
    agent: Rate
    step: Rate
    step_within: Rate

    def as_json(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "k": self.k,
            "agent_accuracy": self.agent.as_json(),
            "step_accuracy": self.step.as_json(),
            "step_within_k_accuracy": self.step_within.as_json(),
        }


def decisive_agreement(
    reference_agents: Sequence[str],
    candidate_agents: Sequence[str],
    reference_steps: Sequence[int | None],
    candidate_steps: Sequence[int | None],
    *,
    k: int = 1,
    seed: int = 0,
) -> DecisiveAgreement:
    """Agent accuracy over the trajectories where both name an agent (names equal);
    step accuracy, exact and within ``k``, where both name a step."""
    if k < 0:
        raise ValueError(f"k is {k}; expected 0 or more")
    n = len(reference_agents)
    if not n == len(candidate_agents) == len(reference_steps) == len(candidate_steps):
        raise ValueError("the four sequences have different lengths")
    ref_a = np.array(reference_agents, dtype=object)
    cand_a = np.array(candidate_agents, dtype=object)
    named = (ref_a != "") & (cand_a != "")
    ref_s = np.array([-1 if s is None else s for s in reference_steps], dtype=np.int64)
    cand_s = np.array([-1 if s is None else s for s in candidate_steps], dtype=np.int64)
    stepped = (ref_s >= 0) & (cand_s >= 0)
    distance = np.abs(ref_s[stepped] - cand_s[stepped])
    return DecisiveAgreement(
        trajectories=n,
        k=k,
        agent=rate((ref_a[named] == cand_a[named]).astype(np.bool_), seed=seed),
        step=rate(distance == 0, seed=seed),
        step_within=rate(distance <= k, seed=seed),
    )
