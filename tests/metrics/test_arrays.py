"""Flat arrays with CSR offsets."""

from __future__ import annotations

import pytest

from metrics.arrays import checked_offsets, offsets_from_lengths, trajectory_index


def test_offsets_and_trajectory_index_follow_lengths() -> None:
    offsets = offsets_from_lengths([2, 0, 3])
    assert offsets.tolist() == [0, 2, 2, 5]
    assert trajectory_index(offsets).tolist() == [0, 0, 2, 2, 2]


def test_offsets_that_do_not_cover_the_steps_are_rejected() -> None:
    with pytest.raises(ValueError, match="offsets"):
        checked_offsets([0, 2], 3)
    with pytest.raises(ValueError, match="offsets"):
        checked_offsets([0, 2, 1, 3], 3)
    assert checked_offsets(None, 3).tolist() == [0, 3]
