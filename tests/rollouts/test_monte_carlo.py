"""Monte Carlo estimates and the first-error binary search, on plain numbers."""

from __future__ import annotations

import math

import pytest

from rollouts.monte_carlo import (
    CriticalVerdict,
    FirstErrorSearch,
    MCEstimate,
    mc_estimate,
    search_probes_bound,
)


def test_hard_and_soft_estimates_of_a_hand_checked_case() -> None:
    # Four continuations, one reaches the answer: soft 1/4, hard good.
    estimate = mc_estimate([False, True, False, False])
    assert (estimate.k, estimate.successes) == (4, 1)
    assert estimate.soft == 0.25
    assert estimate.hard is True
    assert estimate.label() == 1
    assert estimate.label(threshold=0.5) == -1
    none = mc_estimate([False] * 4)
    assert (none.soft, none.hard, none.label()) == (0.0, False, -1)
    assert MCEstimate(0, 0).soft == 0.0


def run_search(candidates: list[int], first_error: int, k: int = 4) -> FirstErrorSearch:
    """A policy that succeeds from every prefix before the error and never after."""
    state = FirstErrorSearch(candidates=candidates)
    while (step := state.next_probe()) is not None:
        state.record(step, k if step < first_error else 0, k)
    return state


@pytest.mark.parametrize("planted", range(7))
def test_binary_search_finds_a_planted_error_in_log_probes(planted: int) -> None:
    state = run_search(list(range(7)), planted)
    assert state.first_error == planted
    assert len(state.probes) <= search_probes_bound(7) == 3
    assert state.rollouts == 4 * len(state.probes)


def test_probe_sequence_for_an_error_at_step_3_of_7() -> None:
    # lo=0 hi=6: probe 3 fails (hi=3); probe 1 succeeds (lo=2); probe 2 succeeds (lo=3).
    state = run_search(list(range(7)), 3, k=8)
    assert [step for step, _, _ in state.probes] == [3, 1, 2]
    assert state.rollouts == 24


def test_search_skips_steps_that_are_not_candidates() -> None:
    state = run_search([0, 2, 4, 6, 8], 5)
    # Step 5 is not labelable: the first candidate after the policy loses its way is 6.
    assert state.first_error == 6


def test_search_state_round_trips_and_refuses_the_wrong_probe() -> None:
    state = FirstErrorSearch(candidates=[0, 1, 2, 3])
    state.record(1, 2, 4)
    again = FirstErrorSearch.from_dict(state.to_dict())
    assert again == state
    with pytest.raises(ValueError, match="not the probe"):
        again.record(0, 1, 4)
    assert FirstErrorSearch(candidates=[5]).first_error == 5
    assert FirstErrorSearch(candidates=[]).first_error is None


def test_bound_is_ceil_log2() -> None:
    assert [search_probes_bound(n) for n in (0, 1, 2, 3, 4, 5, 100)] == [0, 0, 1, 2, 2, 3, 7]
    assert search_probes_bound(1000) == math.ceil(math.log2(1000))


def test_a_step_is_critical_when_the_outcome_flips() -> None:
    fixed = CriticalVerdict(baseline_success=False, alternative=MCEstimate(4, 3))
    assert fixed.critical
    still_wrong = CriticalVerdict(baseline_success=False, alternative=MCEstimate(4, 1))
    assert not still_wrong.critical
    broken = CriticalVerdict(baseline_success=True, alternative=MCEstimate(4, 0))
    assert broken.critical
