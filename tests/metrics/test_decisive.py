"""Agreement on decisive failures against hand-worked cases: agent accuracy, decisive-step
accuracy exact and within k, and the bootstrap intervals around them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metrics.decisive import bootstrap_interval, decisive_agreement, rate


def test_hand_worked_four_trajectories() -> None:
    # Reference:  A@2  B@5  A@0  C@7      candidate:  A@3  A@5  A@0  (none)@9
    # Agents named by both on the first three: right, wrong, right = 2/3. Steps on all
    # four: 2 vs 3 (1 apart), 5 vs 5, 0 vs 0, 7 vs 9 (2 apart) = 2/4 exact, 3/4 within 1,
    # 4/4 within 2.
    args = (["A", "B", "A", "C"], ["A", "A", "A", ""], [2, 5, 0, 7], [3, 5, 0, 9])
    one = decisive_agreement(*args, k=1)
    assert one.trajectories == 4
    assert (one.agent.correct, one.agent.total) == (2, 3)
    assert one.agent.value == pytest.approx(2 / 3)
    assert (one.step.correct, one.step.total) == (2, 4)
    assert (one.step_within.correct, one.step_within.total) == (3, 4)
    two = decisive_agreement(*args, k=2)
    assert (two.step_within.correct, two.step_within.total) == (4, 4)
    zero = decisive_agreement(*args, k=0)
    assert zero.step_within.correct == zero.step.correct == 2


def test_a_missing_step_leaves_the_trajectory_out_of_step_accuracy() -> None:
    result = decisive_agreement(["A", "B"], ["A", "B"], [None, 4], [3, 4], k=1)
    assert (result.agent.correct, result.agent.total) == (2, 2)
    assert (result.step.correct, result.step.total) == (1, 1)


def test_nothing_in_common_is_nan_not_zero() -> None:
    result = decisive_agreement([], [], [], [], k=1)
    assert result.trajectories == 0 and result.agent.total == 0
    assert math.isnan(result.agent.value) and math.isnan(result.agent.low)
    assert result.as_json()["agent_accuracy"] == {
        "correct": 0,
        "total": 0,
        "value": None,
        "low": None,
        "high": None,
    }


def test_bootstrap_interval_of_all_right_is_one_point() -> None:
    assert bootstrap_interval(np.ones(7, dtype=bool)) == (1.0, 1.0)
    assert bootstrap_interval(np.zeros(7, dtype=bool)) == (0.0, 0.0)


def test_bootstrap_interval_of_one_right_of_two_spans_everything() -> None:
    # A resample of two is 0, 1 or 2 right, each mean 0, 0.5, 1 with 1/4, 1/2, 1/4: the
    # 2.5% and 97.5% quantiles of 2,000 draws are 0 and 1.
    low, high = bootstrap_interval(np.array([True, False]))
    assert (low, high) == (0.0, 1.0)


def test_bootstrap_interval_is_seeded_and_narrows_with_more_trajectories() -> None:
    hits = np.array([True] * 30 + [False] * 10)
    assert bootstrap_interval(hits) == bootstrap_interval(hits)
    low, high = bootstrap_interval(hits)
    assert low < 0.75 < high
    # The normal approximation's half width is 1.96 * sqrt(.75 * .25 / 40) = 0.134.
    assert (high - low) / 2 == pytest.approx(0.134, abs=0.03)
    many = np.tile(hits, 25)
    low_many, high_many = bootstrap_interval(many)
    assert high_many - low_many < (high - low) / 3
    # Resamples are drawn in blocks; the blocks do not change the answer's size.
    assert rate(many).total == 1000 and rate(many).correct == 750


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k is -1"):
        decisive_agreement(["A"], ["A"], [0], [0], k=-1)
    with pytest.raises(ValueError, match="different lengths"):
        decisive_agreement(["A"], ["A", "B"], [0], [0], k=1)
