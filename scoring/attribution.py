"""Credit assignment: how much each step of a trajectory earned or lost (no Django).

Every function here is pure and works on plain data. Many trajectories are passed at once
as one flat array of per-step numbers plus CSR-style ``offsets`` of length
``n_trajectories + 1``: trajectory *i* owns ``values[offsets[i]:offsets[i + 1]]``. Leaving
``offsets`` out means the whole array is one trajectory. Per-trajectory inputs (outcome
rewards, initial values) are a scalar or an array with one entry per trajectory.

The per-step maths (value deltas, returns, GAE, first-error search) runs as whole-array
numpy operations without a Python loop over steps, so a million stored steps take well
under a second. Methods that need a model (leave-one-out, Shapley) take the scorer as a
value function ``v(kept_step_indices) -> float`` so the model-running part stays with the
caller, on the ``gpu`` queue.
"""

# Django-free: credit maths on arrays.
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from metrics.arrays import (
    FloatArray,
    IntArray,
    checked_offsets,
    first_flagged,
    flat,
)

Aggregation = Literal["min", "product", "mean", "last"]
ValueFunction = Callable[[frozenset[int]], float]

# Exact Shapley values call the value function on all 2**n coalitions.
EXACT_SHAPLEY_MAX_PLAYERS = 20


# Flat arrays and offsets ----------------------------------------------------------------


def spread_over_steps(per_trajectory: ArrayLike, offsets: ArrayLike) -> FloatArray:
    """Give every step its trajectory's number (e.g. a GRPO or RLOO advantage).

    Outcome-level advantages carry no information about which step mattered, so each step
    of a trajectory gets the same credit, as GRPO gives every token of a completion the
    same advantage.
    """
    bounds = checked_offsets(offsets, None)
    values = flat(per_trajectory, "per_trajectory")
    if values.size != bounds.size - 1:
        raise ValueError("per_trajectory needs one value per trajectory")
    return np.repeat(values, np.diff(bounds))


def _per_trajectory(value: float | ArrayLike, n_trajectories: int, name: str) -> FloatArray:
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        return np.full(n_trajectories, float(array))
    if array.shape != (n_trajectories,):
        raise ValueError(f"{name} must be a scalar or have one value per trajectory")
    return array


def _last_positions(offsets: IntArray) -> tuple[IntArray, NDArray[np.bool_]]:
    """Flat position of each non-empty trajectory's last step, and which are non-empty."""
    non_empty = np.diff(offsets) > 0
    return offsets[1:][non_empty] - 1, non_empty


def _discounted_suffix_sums(x: FloatArray, offsets: IntArray, discount: float) -> FloatArray:
    """``y_t = sum_k discount**k * x_(t+k)`` over the rest of t's own trajectory.

    Computed by doubling (a Hillis-Steele scan): after the round with shift ``s``, each
    ``y_t`` holds the discounted sum of its next ``2 s`` steps, so ``log2(longest)`` rounds
    of whole-array operations replace a loop over steps. Unlike rescaling a plain cumulative
    sum by ``discount**-t``, nothing overflows on long trajectories; powers of the discount
    that underflow to zero are zero to double precision anyway.
    """
    if not 0.0 <= discount <= 1.0:
        raise ValueError("discount factors must lie in [0, 1]")
    lengths = np.diff(offsets)
    longest = int(lengths.max()) if lengths.size else 0
    ends = np.repeat(offsets[1:], lengths)
    positions = np.arange(x.size, dtype=np.int64)
    y = x.copy()
    shift, factor = 1, discount
    while shift < longest:
        source = positions + shift
        inside = source < ends
        # The right-hand side is read from the previous round before anything is written.
        y[inside] += factor * y[source[inside]]
        shift, factor = shift * 2, factor * factor
    return y


def _with_outcome(rewards: FloatArray, offsets: IntArray, outcome: float | ArrayLike) -> FloatArray:
    """Step rewards with each trajectory's outcome reward added to its last step."""
    outcomes = _per_trajectory(outcome, offsets.size - 1, "outcome")
    last, non_empty = _last_positions(offsets)
    total = rewards.copy()
    total[last] += outcomes[non_empty]
    return total


# Value deltas and aggregation -------------------------------------------------------------


def prm_delta(
    values: ArrayLike, offsets: ArrayLike | None = None, *, initial: float | ArrayLike = 1.0
) -> FloatArray:
    """Per-step change of a scorer's value, ``V_t - V_(t-1)``, with ``V_(-1) = initial``.

    The default ``initial = 1`` reads a PRM's "probability the solution is still correct":
    before the first step nothing has gone wrong yet.
    """
    v = flat(values, "values")
    bounds = checked_offsets(offsets, v.size)
    starts_from = _per_trajectory(initial, bounds.size - 1, "initial")
    previous = np.empty_like(v)
    previous[1:] = v[:-1]
    non_empty = np.diff(bounds) > 0
    previous[bounds[:-1][non_empty]] = starts_from[non_empty]
    return v - previous


def aggregate(
    values: ArrayLike, offsets: ArrayLike | None = None, *, how: Aggregation
) -> FloatArray:
    """One score per trajectory from its step values: min, product, mean or last.

    A trajectory with no steps has no score (NaN), whichever aggregation is asked for.
    """
    v = flat(values, "values")
    bounds = checked_offsets(offsets, v.size)
    lengths = np.diff(bounds)
    non_empty = lengths > 0
    starts = bounds[:-1][non_empty]
    scores = np.full(bounds.size - 1, np.nan)
    if not v.size:
        if how not in ("min", "product", "mean", "last"):
            raise ValueError(f"unknown aggregation {how!r}")
        return scores
    # reduceat over the starts of non-empty trajectories only: empty ones in between have
    # no steps, so each reduction still stops at its own trajectory's end.
    if how == "min":
        scores[non_empty] = np.minimum.reduceat(v, starts)
    elif how == "product":
        scores[non_empty] = np.multiply.reduceat(v, starts)
    elif how == "mean":
        scores[non_empty] = np.add.reduceat(v, starts) / lengths[non_empty]
    elif how == "last":
        scores[non_empty] = v[bounds[1:][non_empty] - 1]
    else:
        raise ValueError(f"unknown aggregation {how!r}")
    return scores


# Returns and GAE --------------------------------------------------------------------------


def discounted_returns(
    rewards: ArrayLike,
    offsets: ArrayLike | None = None,
    *,
    outcome: float | ArrayLike = 0.0,
    gamma: float = 1.0,
) -> FloatArray:
    """Discounted return-to-go ``G_t = r_t + gamma * G_(t+1)``, ``G_T = 0``.

    ``rewards`` are dense step rewards (zeros where there are none); each trajectory's
    ``outcome`` reward is added to its last step's reward. A trajectory with no steps has
    nothing to credit, so its outcome is dropped.
    """
    r = flat(rewards, "rewards")
    bounds = checked_offsets(offsets, r.size)
    return _discounted_suffix_sums(_with_outcome(r, bounds, outcome), bounds, gamma)


def gae(
    rewards: ArrayLike,
    values: ArrayLike,
    offsets: ArrayLike | None = None,
    *,
    outcome: float | ArrayLike = 0.0,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> FloatArray:
    """Generalised advantage estimate per step (Schulman et al., 2016).

    ``delta_t = r_t + gamma * V_(t+1) - V_t`` with the value after the last step taken as
    0 (the episode has ended), and ``A_t = sum_k (gamma * lam)**k * delta_(t+k)``. The
    outcome reward is added to the last step's reward as in :func:`discounted_returns`.
    ``lam = 1`` gives ``G_t - V_t``; ``lam = 0`` gives the one-step TD error. The
    lambda-returns to train a value head on are ``gae(...) + values``.
    """
    r = flat(rewards, "rewards")
    v = flat(values, "values")
    if v.size != r.size:
        raise ValueError("rewards and values need one entry per step")
    if not 0.0 <= lam <= 1.0:
        raise ValueError("lam must lie in [0, 1]")
    bounds = checked_offsets(offsets, r.size)
    next_value = np.zeros_like(v)
    next_value[:-1] = v[1:]
    last, _ = _last_positions(bounds)
    next_value[last] = 0.0
    delta = _with_outcome(r, bounds, outcome) + gamma * next_value - v
    return _discounted_suffix_sums(delta, bounds, gamma * lam)


# Group-relative baselines -----------------------------------------------------------------


def _groups(rewards: FloatArray, groups: ArrayLike | None) -> tuple[IntArray, IntArray]:
    if groups is None:
        return np.zeros(rewards.size, dtype=np.int64), np.array([rewards.size], dtype=np.int64)
    keys = np.asarray(groups)
    if keys.shape != rewards.shape:
        raise ValueError("groups needs one key per trajectory")
    _, inverse = np.unique(keys, return_inverse=True)
    group = inverse.reshape(-1).astype(np.int64)
    return group, np.bincount(group).astype(np.int64)


def grpo_advantages(
    rewards: ArrayLike,
    groups: ArrayLike | None = None,
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> FloatArray:
    """GRPO advantage per trajectory: its reward minus its group's mean reward.

    ``groups`` holds a key per trajectory (the ``task_key``); without it all trajectories
    form one group. With ``scale_by_std`` the difference is divided by the group's
    standard deviation plus ``eps``; the deviation is the unbiased one (``n - 1``), as in
    TRL and verl. A group of one has no baseline and gets advantage 0.
    """
    r = flat(rewards, "rewards")
    group, counts = _groups(r, groups)
    mean = np.bincount(group, weights=r, minlength=counts.size) / counts
    deviation = r - mean[group]
    if not scale_by_std:
        return deviation
    squares = np.bincount(group, weights=deviation**2, minlength=counts.size)
    variance = np.divide(
        squares, counts - 1, out=np.zeros(counts.size), where=counts > 1, dtype=np.float64
    )
    return deviation / (np.sqrt(variance)[group] + eps)


def rloo_advantages(rewards: ArrayLike, groups: ArrayLike | None = None) -> FloatArray:
    """RLOO advantage per trajectory: its reward minus the mean of the *other* rewards of
    its group (Ahmadian et al., 2024). A group of one has no baseline and gets 0."""
    r = flat(rewards, "rewards")
    group, counts = _groups(r, groups)
    totals = np.bincount(group, weights=r, minlength=counts.size)
    others = counts[group] - 1
    baseline = np.divide(
        totals[group] - r, others, out=r.copy(), where=others > 0, dtype=np.float64
    )
    return r - baseline


# First-error localisation -----------------------------------------------------------------


def first_error(
    values: ArrayLike,
    offsets: ArrayLike | None = None,
    *,
    threshold: float | None = None,
    drop: float | None = None,
    initial: float | ArrayLike = 1.0,
) -> IntArray:
    """Per trajectory, the index of the first step whose value signals an error, or -1.

    A step is flagged when its value is under ``threshold`` or, with ``drop``, when it
    fell by more than ``drop`` from the previous step's value (``initial`` before the
    first step; pass a :class:`PrefixTree`'s ``root_value`` for MC values). NaN values
    (unscored steps) are never flagged.
    """
    if threshold is None and drop is None:
        raise ValueError("give a threshold, a drop, or both")
    v = flat(values, "values")
    bounds = checked_offsets(offsets, v.size)
    flagged = np.zeros(v.size, dtype=bool)
    if threshold is not None:
        flagged |= v < threshold
    if drop is not None:
        flagged |= prm_delta(v, bounds, initial=initial) < -drop
    return first_flagged(flagged, bounds)


# Leave-one-out and Shapley values ---------------------------------------------------------


@dataclass(frozen=True)
class ShapleyResult:
    """Shapley values of the players (steps, or agents for :func:`agent_shapley`).

    ``efficiency_gap`` is ``|sum(values) - (v_all - v_empty)|``. Both exact and sampled
    values are efficient by construction (every permutation's contributions telescope from
    ``v_empty`` to ``v_all``, and each coalition is evaluated once, so a noisy scorer cannot
    break it), so the gap is rounding error; it is reported so that the property is checked
    rather than assumed. The sampling error lies in the split between players instead:
    ``std_error`` is each sampled value's Monte Carlo standard error (None when exact).
    ``evaluations`` counts the distinct coalitions the value function was called on.
    """

    players: tuple[int | str, ...]
    values: FloatArray
    v_all: float
    v_empty: float
    efficiency_gap: float
    std_error: FloatArray | None
    evaluations: int
    permutations: int = 0

    def as_dict(self) -> dict[int | str, float]:
        return {
            player: float(value) for player, value in zip(self.players, self.values, strict=True)
        }


class _CachedValue:
    """Calls the value function at most once per coalition (keyed by a bitmask)."""

    def __init__(self, v: ValueFunction, n: int) -> None:
        self._v = v
        self._n = n
        self._cache: dict[int, float] = {}

    def __call__(self, mask: int) -> float:
        if mask not in self._cache:
            members = frozenset(i for i in range(self._n) if mask >> i & 1)
            self._cache[mask] = float(self._v(members))
        return self._cache[mask]

    @property
    def evaluations(self) -> int:
        return len(self._cache)


def leave_one_out(v: ValueFunction, n: int) -> FloatArray:
    """``v(all) - v(all without step t)`` for each of the ``n`` steps (n + 1 calls of v)."""
    everything = frozenset(range(n))
    v_all = float(v(everything))
    return np.array([v_all - float(v(everything - {i})) for i in range(n)], dtype=np.float64)


def shapley_exact(v: ValueFunction, n: int) -> ShapleyResult:
    """Exact Shapley values by enumerating all ``2**n`` coalitions (small n only)."""
    if not 0 <= n <= EXACT_SHAPLEY_MAX_PLAYERS:
        raise ValueError(
            f"exact Shapley values need 0 to {EXACT_SHAPLEY_MAX_PLAYERS} players; sample "
            "permutations for more"
        )
    value = _CachedValue(v, n)
    masks = np.arange(1 << n, dtype=np.int64)
    table = np.array([value(int(mask)) for mask in masks], dtype=np.float64)
    sizes = np.zeros(masks.size, dtype=np.int64)
    for i in range(n):
        sizes += (masks >> i) & 1
    # Weight of a coalition of size k that player i joins: k! (n - k - 1)! / n!.
    weights = np.array(
        [1.0 / (n * math.comb(n - 1, k)) for k in range(n)] if n else [], dtype=np.float64
    )
    phi = np.empty(n, dtype=np.float64)
    for i in range(n):
        without = masks[((masks >> i) & 1) == 0]
        gains = table[without | (1 << i)] - table[without]
        phi[i] = float(np.sum(weights[sizes[without]] * gains))
    return _shapley_result(tuple(range(n)), phi, value, None, 0)


def shapley_sampled(
    v: ValueFunction, n: int, *, permutations: int = 200, seed: int = 0
) -> ShapleyResult:
    """Shapley values estimated from ``permutations`` random orderings of the players.

    Each player's value is its mean marginal contribution ``v(before + {i}) - v(before)``
    over the sampled orderings (Castro et al., 2009). The value function is called at most
    once per distinct coalition.
    """
    if n < 0 or permutations < 1:
        raise ValueError("need n >= 0 players and at least one permutation")
    value = _CachedValue(v, n)
    rng = np.random.default_rng(seed)
    contributions = np.zeros((permutations, n), dtype=np.float64)
    for row in range(permutations):
        mask = 0
        previous = value(mask)
        for player in rng.permutation(n):
            mask |= 1 << int(player)
            current = value(mask)
            contributions[row, player] = current - previous
            previous = current
    std_error = (
        contributions.std(axis=0, ddof=1) / math.sqrt(permutations)
        if permutations > 1
        else np.full(n, np.nan)
    )
    return _shapley_result(
        tuple(range(n)), contributions.mean(axis=0), value, std_error, permutations
    )


def agent_shapley(
    v: ValueFunction,
    owners: Mapping[str, Iterable[int]],
    *,
    shared: Iterable[int] = (),
    permutations: int | None = None,
    seed: int = 0,
) -> ShapleyResult:
    """Shapley values of the agents of a multi-agent run.

    The players are the agents; a coalition keeps the steps of its agents (``owners``
    maps each agent to its step indices) plus the ``shared`` steps every coalition keeps
    (the task, environment messages). Exact when ``permutations`` is None, sampled
    otherwise. A step may belong to one agent only.
    """
    agents = tuple(owners)
    shared_steps = frozenset(shared)
    steps_of = [frozenset(owners[agent]) for agent in agents]
    seen: set[int] = set(shared_steps)
    for agent, steps in zip(agents, steps_of, strict=True):
        if seen & steps:
            raise ValueError(f"agent {agent!r} owns steps already owned or shared")
        seen |= steps

    def coalition_value(players: frozenset[int]) -> float:
        return v(shared_steps.union(*(steps_of[p] for p in players)))

    if permutations is None:
        result = shapley_exact(coalition_value, len(agents))
    else:
        result = shapley_sampled(coalition_value, len(agents), permutations=permutations, seed=seed)
    return ShapleyResult(
        players=agents,
        values=result.values,
        v_all=result.v_all,
        v_empty=result.v_empty,
        efficiency_gap=result.efficiency_gap,
        std_error=result.std_error,
        evaluations=result.evaluations,
        permutations=result.permutations,
    )


def _shapley_result(
    players: tuple[int | str, ...],
    phi: FloatArray,
    value: _CachedValue,
    std_error: FloatArray | None,
    permutations: int,
) -> ShapleyResult:
    v_all = value((1 << len(players)) - 1)
    v_empty = value(0)
    return ShapleyResult(
        players=players,
        values=phi,
        v_all=v_all,
        v_empty=v_empty,
        efficiency_gap=abs(float(phi.sum()) - (v_all - v_empty)),
        std_error=std_error,
        evaluations=value.evaluations,
        permutations=permutations,
    )
