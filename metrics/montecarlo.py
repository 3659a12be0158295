"""Monte Carlo values of the prefix nodes of one task's rollouts: rollouts that share
their first k steps share a node, whose value is the mean outcome through it, smoothed
with a Beta-binomial prior into a posterior mean and a credible interval."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import betaincinv

from metrics.arrays import FloatArray, IntArray, flat, offsets_from_lengths, trajectory_index


@dataclass(frozen=True)
class PrefixTree:
    """Monte Carlo values of the prefix nodes of one task's rollouts.

    Nodes are listed in order of first appearance, so a parent always comes before its
    children. ``parent`` is -1 for first steps (children of the root, the task itself).
    ``step_node`` maps every rollout step to its node, laid out flat with ``offsets`` like
    the other functions here, so ``tree.value[tree.step_node]`` are per-step MC values.
    """

    hashes: tuple[str, ...]
    parent: IntArray
    depth: IntArray
    visits: IntArray
    successes: FloatArray
    # Mean outcome of the rollouts through the node: the plain Monte Carlo estimate.
    value: FloatArray
    # Beta-binomial posterior mean and central credible interval of the success rate.
    posterior_mean: FloatArray
    lower: FloatArray
    upper: FloatArray
    # Node value minus its parent's value; the root's value is the task's mean outcome.
    advantage: FloatArray
    posterior_advantage: FloatArray
    root_value: float
    root_posterior_mean: float
    step_node: IntArray
    offsets: IntArray

    def step_values(self) -> FloatArray:
        return self.value[self.step_node]

    def step_advantages(self) -> FloatArray:
        return self.advantage[self.step_node]


def mc_prefix(
    rollouts: Sequence[Sequence[str]],
    outcomes: ArrayLike,
    *,
    prior: tuple[float, float] = (1.0, 1.0),
    level: float = 0.95,
) -> PrefixTree:
    """Monte Carlo value of every prefix node of one task's rollouts.

    ``rollouts[i]`` lists the prefix hashes of rollout *i*'s steps (rollouts that share
    their first k steps share their first k hashes) and ``outcomes[i]`` is its outcome in
    [0, 1] (usually 0 or 1; a fractional outcome counts as a fractional success). A node's
    value is the mean outcome of the rollouts through it. With a ``Beta(a, b)`` prior
    (default uniform) its posterior is ``Beta(a + s, b + n - s)`` for s successes in n
    visits; the interval is the central ``level`` credible interval. Grouping is done with
    ``np.unique`` on the hashes, not a loop over rollouts.
    """
    results = flat(outcomes, "outcomes")
    if results.size != len(rollouts):
        raise ValueError("outcomes needs one value per rollout")
    if not results.size:
        raise ValueError("a prefix tree needs at least one rollout")
    if np.any((results < 0) | (results > 1)) or np.any(np.isnan(results)):
        raise ValueError("outcomes must lie in [0, 1]")
    a, b = prior
    if a <= 0 or b <= 0:
        raise ValueError("the Beta prior needs positive parameters")
    if not 0.0 < level < 1.0:
        raise ValueError("level must lie strictly between 0 and 1")

    offsets = offsets_from_lengths([len(rollout) for rollout in rollouts])
    hashes = np.asarray(list(itertools.chain.from_iterable(rollouts)), dtype=np.str_)
    unique, first_seen, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    # Renumber nodes by first appearance; a child first appears after its parent did.
    order = np.argsort(first_seen, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    step_node = rank[inverse.reshape(-1)].astype(np.int64)
    n_nodes = order.size

    owner = trajectory_index(offsets)
    step_depth = np.arange(hashes.size, dtype=np.int64) - offsets[owner]
    step_parent = np.full(hashes.size, -1, dtype=np.int64)
    inner = step_depth > 0
    step_parent[inner] = step_node[np.flatnonzero(inner) - 1]
    parent = np.full(n_nodes, -1, dtype=np.int64)
    parent[step_node] = step_parent
    depth = np.zeros(n_nodes, dtype=np.int64)
    depth[step_node] = step_depth
    if np.any(parent[step_node] != step_parent):
        clash = int(step_node[np.flatnonzero(parent[step_node] != step_parent)[0]])
        raise ValueError(
            f"prefix hash {unique[order[clash]]!r} follows different prefixes: these are "
            "not prefix hashes of one task"
        )

    visits = np.bincount(step_node, minlength=n_nodes).astype(np.int64)
    successes = np.bincount(step_node, weights=results[owner], minlength=n_nodes).astype(np.float64)
    value = successes / visits
    alpha = a + successes
    beta = b + visits - successes
    posterior_mean = alpha / (alpha + beta)
    tail = (1.0 - level) / 2.0
    lower = np.asarray(betaincinv(alpha, beta, tail), dtype=np.float64)
    upper = np.asarray(betaincinv(alpha, beta, 1.0 - tail), dtype=np.float64)

    root_value = float(results.mean())
    root_posterior_mean = float((a + results.sum()) / (a + b + results.size))
    has_parent = parent >= 0
    safe_parent = np.where(has_parent, parent, 0)
    parent_value = np.where(has_parent, value[safe_parent], root_value)
    parent_posterior = np.where(has_parent, posterior_mean[safe_parent], root_posterior_mean)
    return PrefixTree(
        hashes=tuple(str(h) for h in unique[order]),
        parent=parent,
        depth=depth,
        visits=visits,
        successes=successes,
        value=value,
        posterior_mean=posterior_mean,
        lower=lower,
        upper=upper,
        advantage=value - parent_value,
        posterior_advantage=posterior_mean - parent_posterior,
        root_value=root_value,
        root_posterior_mean=root_posterior_mean,
        step_node=step_node,
        offsets=offsets,
    )
