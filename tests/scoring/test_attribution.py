"""Credit-assignment maths against hand-worked cases and direct (looped) definitions."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from metrics.arrays import offsets_from_lengths
from metrics.montecarlo import mc_prefix
from scoring.attribution import (
    ValueFunction,
    agent_shapley,
    aggregate,
    discounted_returns,
    first_error,
    gae,
    grpo_advantages,
    leave_one_out,
    prm_delta,
    rloo_advantages,
    shapley_exact,
    shapley_sampled,
    spread_over_steps,
)
from tests.metrics.test_montecarlo import OUTCOMES, ROLLOUTS

approx = pytest.approx


def looped_returns(rewards: list[float], outcome: float, gamma: float) -> list[float]:
    """The textbook recursion, one step at a time, as the reference."""
    returns = [0.0] * len(rewards)
    following = 0.0
    for t in reversed(range(len(rewards))):
        reward = rewards[t] + (outcome if t == len(rewards) - 1 else 0.0)
        following = reward + gamma * following
        returns[t] = following
    return returns


# Offsets ----------------------------------------------------------------------------------


def test_bad_offsets_are_rejected() -> None:
    with pytest.raises(ValueError, match="offsets"):
        prm_delta([0.5, 0.4, 0.3], [0, 2])
    with pytest.raises(ValueError, match="offsets"):
        prm_delta([0.5, 0.4, 0.3], [0, 2, 1, 3])


# PRM deltas and aggregation ---------------------------------------------------------------


def test_prm_delta_starts_each_trajectory_from_initial() -> None:
    values = [0.9, 0.6, 0.7, 0.5, 0.2]
    deltas = prm_delta(values, [0, 3, 3, 5])
    assert deltas == approx([-0.1, -0.3, 0.1, -0.5, -0.3])


def test_prm_delta_takes_an_initial_value_per_trajectory() -> None:
    deltas = prm_delta([0.9, 0.6, 0.5, 0.2], [0, 2, 4], initial=[0.5, 0.75])
    assert deltas == approx([0.4, -0.3, -0.25, -0.3])


def test_aggregate_by_each_method() -> None:
    values = [0.9, 0.5, 0.8, 0.6, 0.4]
    offsets = [0, 3, 3, 5]
    assert aggregate(values, offsets, how="min") == approx([0.5, np.nan, 0.4], nan_ok=True)
    assert aggregate(values, offsets, how="product") == approx([0.36, np.nan, 0.24], nan_ok=True)
    assert aggregate(values, offsets, how="mean") == approx([2.2 / 3, np.nan, 0.5], nan_ok=True)
    assert aggregate(values, offsets, how="last") == approx([0.8, np.nan, 0.4], nan_ok=True)
    assert aggregate(values, how="min") == approx([0.4])


def test_aggregate_rejects_an_unknown_method() -> None:
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregate([0.5], how="median")  # type: ignore[arg-type]


# Returns and GAE --------------------------------------------------------------------------


def test_returns_hand_worked() -> None:
    # Trajectory 1: G3 = 1, G2 = 0.5 * 1, G1 = 0.1 + 0.5 * 0.5, G0 = 0.5 * 0.35.
    # Trajectory 2 (outcome 0): G2 = 0.3, G1 = -0.1 + 0.15, G0 = 0.2 + 0.5 * 0.05.
    returns = discounted_returns(
        [0.0, 0.1, 0.0, 0.0, 0.2, -0.1, 0.3], [0, 4, 7], outcome=[1.0, 0.0], gamma=0.5
    )
    assert returns == approx([0.175, 0.35, 0.5, 1.0, 0.225, 0.05, 0.3])


def test_returns_without_discount_are_suffix_sums() -> None:
    returns = discounted_returns([1.0, 2.0, 3.0], outcome=10.0)
    assert returns == approx([16.0, 15.0, 13.0])


def test_returns_match_the_recursion_on_long_and_empty_trajectories() -> None:
    rng = np.random.default_rng(7)
    lengths = [1, 0, 1000, 37, 2, 513]
    rewards = rng.normal(size=sum(lengths))
    outcomes = rng.integers(0, 2, size=len(lengths)).astype(float)
    offsets = offsets_from_lengths(lengths)
    returns = discounted_returns(rewards, offsets, outcome=outcomes, gamma=0.97)
    expected: list[float] = []
    for i in range(len(lengths)):
        chunk = rewards[offsets[i] : offsets[i + 1]].tolist()
        expected += looped_returns(chunk, outcomes[i], 0.97)
    assert returns == approx(expected, rel=1e-9, abs=1e-9)


def test_returns_stay_finite_when_discount_powers_underflow() -> None:
    returns = discounted_returns(np.zeros(5000), outcome=1.0, gamma=0.5)
    assert np.all(np.isfinite(returns))
    assert returns[-3:] == approx([0.25, 0.5, 1.0])
    assert returns[0] == 0.0


def test_gae_hand_worked() -> None:
    # delta = [0.9*0.6 - 0.5, 0.9*0.8 - 0.6, 1 - 0.8] = [0.04, 0.12, 0.2]; gamma*lam = 0.45.
    advantages = gae([0.0, 0.0, 0.0], [0.5, 0.6, 0.8], outcome=1.0, gamma=0.9, lam=0.5)
    assert advantages == approx([0.04 + 0.45 * 0.21, 0.12 + 0.45 * 0.2, 0.2])


def test_gae_lambda_one_is_return_minus_value_and_lambda_zero_is_td_error() -> None:
    rewards = [0.1, 0.0, 0.2, 0.0]
    values = [0.3, 0.5, 0.4, 0.9]
    returns = discounted_returns(rewards, outcome=1.0, gamma=0.8)
    assert gae(rewards, values, outcome=1.0, gamma=0.8, lam=1.0) == approx(
        returns - np.array(values)
    )
    td = [0.1 + 0.8 * 0.5 - 0.3, 0.0 + 0.8 * 0.4 - 0.5, 0.2 + 0.8 * 0.9 - 0.4, 1.0 - 0.9]
    assert gae(rewards, values, outcome=1.0, gamma=0.8, lam=0.0) == approx(td)


def test_gae_uses_terminal_value_zero_at_each_trajectory_end() -> None:
    # The next trajectory's first value must not leak in as V after the last step.
    advantages = gae([0.0, 0.0, 0.0], [0.5, 0.9, 0.4], [0, 1, 3], outcome=[1.0, 0.0], gamma=0.9)
    assert advantages[0] == approx(1.0 - 0.5)
    assert advantages[1:] == approx([0.9 * 0.4 - 0.9 + (0.0 - 0.4) * 0.9, -0.4])


# First errors on Monte Carlo values ------------------------------------------------------


def test_mc_first_error_finds_the_collapse() -> None:
    tree = mc_prefix(ROLLOUTS, OUTCOMES)
    values = tree.step_values()
    # Rollout 1 walks a (2/3), b (1/2), d (0): from the root's 1/2 the drops are -1/6, 1/6,
    # 1/2; rollout 3's only step f (0) drops 1/2 from the root.
    found = first_error(values, tree.offsets, drop=0.4, initial=tree.root_value)
    assert found.tolist() == [-1, 2, -1, 0]
    assert first_error(values, tree.offsets, threshold=0.6).tolist() == [1, 1, -1, 0]


# Group-relative baselines -----------------------------------------------------------------


def test_grpo_hand_worked() -> None:
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0]
    groups = ["x", "x", "x", "y", "y"]
    # x: mean 2/3, unbiased std sqrt(1/3); y: mean 1/2, unbiased std sqrt(1/2).
    advantages = grpo_advantages(rewards, groups, eps=0.0)
    root3, root2 = math.sqrt(3), math.sqrt(2)
    assert advantages == approx([root3 / 3, -2 * root3 / 3, root3 / 3, root2 / 2, -root2 / 2])
    plain = grpo_advantages(rewards, groups, scale_by_std=False)
    assert plain == approx([1 / 3, -2 / 3, 1 / 3, 0.5, -0.5])


def test_grpo_gives_zero_to_singletons_and_unanimous_groups() -> None:
    advantages = grpo_advantages([1.0, 1.0, 1.0, 0.3], ["x", "x", "x", "y"])
    assert advantages == approx([0.0, 0.0, 0.0, 0.0])


def test_rloo_hand_worked() -> None:
    advantages = rloo_advantages([1.0, 0.0, 1.0, 1.0, 0.0, 0.7], [0, 0, 0, 1, 1, 2])
    # x: 1 - (0 + 1)/2, 0 - (1 + 1)/2, ...; y: 1 - 0, 0 - 1; a group of one gets 0.
    assert advantages == approx([0.5, -1.0, 0.5, 1.0, -1.0, 0.0])
    assert rloo_advantages([3.0, 1.0]) == approx([2.0, -2.0])


def test_trajectory_advantage_spreads_to_every_step() -> None:
    assert spread_over_steps([0.5, 2.0, -1.0], [0, 2, 2, 5]).tolist() == [
        0.5,
        0.5,
        -1.0,
        -1.0,
        -1.0,
    ]


# First error ------------------------------------------------------------------------------


def test_first_error_under_threshold() -> None:
    values = [0.9, 0.4, 0.2, 0.9, 0.95, np.nan, 0.3, 0.6]
    offsets = [0, 3, 5, 5, 7, 8]
    assert first_error(values, offsets, threshold=0.5).tolist() == [1, -1, -1, 1, -1]


def test_first_error_by_drop_uses_initial_before_the_first_step() -> None:
    values = [0.5, 0.45, 0.1, 0.9, 0.5]
    assert first_error(values, [0, 3, 5], drop=0.3).tolist() == [0, 1]
    assert first_error(values, [0, 3, 5], drop=0.3, initial=0.5).tolist() == [2, 1]
    with pytest.raises(ValueError):
        first_error(values)


# Leave-one-out and Shapley ----------------------------------------------------------------

WEIGHTS = [0.5, -0.2, 1.5, 0.0, 0.25]


def additive(kept: frozenset[int]) -> float:
    return sum(WEIGHTS[i] for i in kept)


def random_game(n: int, seed: int) -> ValueFunction:
    """A game with an arbitrary value for every coalition: nothing additive to lean on."""
    table = np.random.default_rng(seed).normal(size=1 << n)

    def v(kept: frozenset[int]) -> float:
        return float(table[sum(1 << i for i in kept)])

    return v


def brute_force_shapley(v: ValueFunction, n: int) -> list[float]:
    """The definition: average marginal contribution over all n! orderings."""
    totals = [0.0] * n
    orderings = list(itertools.permutations(range(n)))
    for ordering in orderings:
        before: frozenset[int] = frozenset()
        for player in ordering:
            totals[player] += v(before | {player}) - v(before)
            before = before | {player}
    return [total / len(orderings) for total in totals]


def test_leave_one_out_hand_worked() -> None:
    calls: list[frozenset[int]] = []

    def v(kept: frozenset[int]) -> float:
        calls.append(kept)
        return additive(kept) + (1.0 if {0, 1} <= kept else 0.0)

    assert leave_one_out(v, 5) == approx([1.5, 0.8, 1.5, 0.0, 0.25])
    assert len(calls) == 6


def test_shapley_of_an_additive_game_is_each_steps_contribution() -> None:
    exact = shapley_exact(additive, 5)
    sampled = shapley_sampled(additive, 5, permutations=7, seed=3)
    assert exact.values == approx(WEIGHTS)
    assert sampled.values == approx(WEIGHTS)
    assert exact.v_all == approx(sum(WEIGHTS))
    assert exact.evaluations == 32


def test_exact_shapley_equals_brute_force() -> None:
    v = random_game(5, seed=1)
    exact = shapley_exact(v, 5)
    assert exact.values == approx(brute_force_shapley(v, 5))
    assert exact.efficiency_gap < 1e-12
    assert exact.values.sum() == approx(exact.v_all - exact.v_empty)


def test_exact_shapley_splits_an_interaction_evenly() -> None:
    def both(kept: frozenset[int]) -> float:
        return 1.0 if {0, 2} <= kept else 0.0

    assert shapley_exact(both, 4).values == approx([0.5, 0.0, 0.5, 0.0])


def test_sampled_shapley_is_efficient_and_close_to_exact() -> None:
    v = random_game(6, seed=2)
    exact = shapley_exact(v, 6)
    sampled = shapley_sampled(v, 6, permutations=4000, seed=0)
    assert sampled.efficiency_gap < 1e-9
    assert sampled.std_error is not None
    assert np.all(np.abs(sampled.values - exact.values) <= 5 * sampled.std_error + 1e-12)
    assert sampled.values == approx(exact.values, abs=0.1)
    # A coalition is evaluated once however many permutations pass through it.
    assert sampled.evaluations <= 64


def test_sampled_shapley_is_reproducible_from_its_seed() -> None:
    v = random_game(6, seed=4)
    first = shapley_sampled(v, 6, permutations=20, seed=11)
    again = shapley_sampled(v, 6, permutations=20, seed=11)
    other = shapley_sampled(v, 6, permutations=20, seed=12)
    assert first.values.tolist() == again.values.tolist()
    assert first.values.tolist() != other.values.tolist()


def test_exact_shapley_refuses_too_many_players() -> None:
    with pytest.raises(ValueError, match="players"):
        shapley_exact(additive, 21)


def test_agent_shapley_plays_coalitions_of_agents_with_shared_steps_kept() -> None:
    calls: list[frozenset[int]] = []

    def v(kept: frozenset[int]) -> float:
        calls.append(kept)
        return additive(kept) + (1.0 if {0, 2} <= kept else 0.0)

    result = agent_shapley(v, {"planner": [0, 1], "coder": [2, 3]}, shared=[4])
    assert result.players == ("planner", "coder")
    # Each agent gets its own steps' weights plus half of the planner-coder interaction.
    assert result.as_dict() == approx({"planner": 0.3 + 0.5, "coder": 1.5 + 0.5})
    assert result.v_empty == approx(0.25)
    assert all(4 in kept for kept in calls)
    sampled = agent_shapley(v, {"planner": [0, 1], "coder": [2, 3]}, shared=[4], permutations=50)
    # Sampled orderings give the interaction to whichever agent came second.
    assert sampled.std_error is not None
    assert np.all(np.abs(sampled.values - result.values) <= 5 * sampled.std_error)
    assert sampled.values.sum() == approx(result.values.sum())
    assert sampled.efficiency_gap < 1e-12


def test_agent_shapley_rejects_a_step_owned_twice() -> None:
    with pytest.raises(ValueError, match="owns steps"):
        agent_shapley(additive, {"a": [0, 1], "b": [1, 2]})
