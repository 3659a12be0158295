"""Flat per-step arrays with CSR offsets, the layout of every function in :mod:`metrics`
and :mod:`scoring.attribution`: many trajectories at once as one array of per-step
numbers plus ``offsets`` of length ``n_trajectories + 1``, trajectory *i* owning
``values[offsets[i]:offsets[i + 1]]``."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def flat(values: ArrayLike, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional")
    return array


def checked_offsets(offsets: ArrayLike | None, n_steps: int | None) -> IntArray:
    """The offsets as an array, checked; ``None`` means all ``n_steps`` are one trajectory."""
    if offsets is None:
        if n_steps is None:
            raise ValueError("offsets are required here")
        return np.array([0, n_steps], dtype=np.int64)
    bounds = np.asarray(offsets, dtype=np.int64)
    if (
        bounds.ndim != 1
        or bounds.size == 0
        or bounds[0] != 0
        or np.any(np.diff(bounds) < 0)
        or (n_steps is not None and bounds[-1] != n_steps)
    ):
        raise ValueError(
            "offsets must be one-dimensional, start at 0, never decrease and end at the "
            "number of steps"
        )
    return bounds


def offsets_from_lengths(lengths: ArrayLike) -> IntArray:
    """CSR offsets for trajectories of the given step counts: ``[0, l0, l0 + l1, ...]``."""
    counts = np.asarray(lengths, dtype=np.int64)
    if counts.ndim != 1 or np.any(counts < 0):
        raise ValueError("lengths must be a one-dimensional array of non-negative counts")
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def trajectory_index(offsets: ArrayLike) -> IntArray:
    """For every flat position, the index of the trajectory it belongs to."""
    bounds = checked_offsets(offsets, None)
    return np.repeat(np.arange(bounds.size - 1, dtype=np.int64), np.diff(bounds))


def first_flagged(flagged: NDArray[np.bool_], offsets: IntArray) -> IntArray:
    """Per trajectory, the step index (within it) of the first flagged step, or -1."""
    first = np.full(offsets.size - 1, -1, dtype=np.int64)
    hits = np.flatnonzero(flagged)
    if hits.size:
        owner = np.searchsorted(offsets, hits, side="right") - 1
        # hits are sorted, so the first hit of each trajectory is its first occurrence.
        trajectories, first_hit = np.unique(owner, return_index=True)
        first[trajectories] = hits[first_hit] - offsets[trajectories]
    return first


def segment_min(values: FloatArray, offsets: IntArray) -> FloatArray:
    """Minimum of each trajectory's values; +inf for a trajectory with no steps."""
    minimum = np.full(offsets.size - 1, np.inf)
    non_empty = np.diff(offsets) > 0
    if values.size:
        minimum[non_empty] = np.minimum.reduceat(values, offsets[:-1][non_empty])
    return minimum


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when there is nothing to divide by."""
    return numerator / denominator if denominator else float("nan")
