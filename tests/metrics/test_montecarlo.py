"""Monte Carlo values on a prefix tree, against hand-worked cases and scipy's Beta
quantiles."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from metrics.montecarlo import mc_prefix

approx = pytest.approx

# Four rollouts of one task:   root ─ a ─ b ─ c  (1)
#                                     │    └─ d  (0)
#                                     └─ e      (1)
#                              root ─ f          (0)
ROLLOUTS = [["a", "b", "c"], ["a", "b", "d"], ["a", "e"], ["f"]]
OUTCOMES = [1, 0, 1, 0]


def test_mc_prefix_values_and_advantages_on_a_small_tree() -> None:
    tree = mc_prefix(ROLLOUTS, OUTCOMES)
    assert tree.hashes == ("a", "b", "c", "d", "e", "f")
    assert tree.parent.tolist() == [-1, 0, 1, 1, 0, -1]
    assert tree.depth.tolist() == [0, 1, 2, 2, 1, 0]
    assert tree.visits.tolist() == [3, 2, 1, 1, 1, 1]
    assert tree.root_value == 0.5
    assert tree.value == approx([2 / 3, 1 / 2, 1, 0, 1, 0])
    # Child minus parent; a and f hang off the root, whose value is the mean outcome 1/2.
    assert tree.advantage == approx([1 / 6, -1 / 6, 1 / 2, -1 / 2, 1 / 3, -1 / 2])
    assert tree.offsets.tolist() == [0, 3, 6, 8, 9]
    assert tree.step_values()[3:6] == approx([2 / 3, 1 / 2, 0])
    assert tree.step_advantages()[6:8] == approx([1 / 6, 1 / 3])


def test_mc_prefix_beta_posterior_mean_and_interval() -> None:
    tree = mc_prefix(ROLLOUTS, OUTCOMES)
    # Beta(1, 1) prior: (1 + s) / (2 + n).
    assert tree.posterior_mean == approx([3 / 5, 2 / 4, 2 / 3, 1 / 3, 2 / 3, 1 / 3])
    assert tree.root_posterior_mean == approx(3 / 6)
    assert tree.posterior_advantage == approx([0.1, -0.1, 1 / 6, -1 / 6, 2 / 30, -1 / 6])
    # Node c: Beta(2, 1) has CDF x**2, so its 95% interval is [sqrt(.025), sqrt(.975)].
    assert (tree.lower[2], tree.upper[2]) == approx((math.sqrt(0.025), math.sqrt(0.975)))
    # Node d: Beta(1, 2) has CDF 1 - (1 - x)**2.
    assert (tree.lower[3], tree.upper[3]) == approx((1 - math.sqrt(0.975), 1 - math.sqrt(0.025)))
    # Node a: Beta(3, 2), against scipy's quantiles.
    assert (tree.lower[0], tree.upper[0]) == approx(stats.beta(3, 2).ppf([0.025, 0.975]))


def test_mc_prefix_prior_and_level_are_configurable() -> None:
    tree = mc_prefix(ROLLOUTS, OUTCOMES, prior=(2.0, 2.0), level=0.5)
    assert tree.posterior_mean[0] == approx(4 / 7)
    assert (tree.lower[0], tree.upper[0]) == approx(stats.beta(4, 3).ppf([0.25, 0.75]))


def test_mc_prefix_rejects_hashes_that_are_not_prefix_hashes() -> None:
    with pytest.raises(ValueError, match="different prefixes"):
        mc_prefix([["a", "b"], ["c", "b"]], [1, 0])
    with pytest.raises(ValueError, match="outcomes"):
        mc_prefix([["a"]], [2.0])
