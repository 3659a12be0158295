"""The numbers of the judge alignment page, from arrays (no Django): for one prompt
version of a judge, Cohen's kappa, bad-step F1 and ProcessBench first-error F1 against a
human label source, each with a percentile bootstrap interval.

The bootstrap resamples trajectories, not steps: a trajectory's steps are judged (and
labelled) together, so resampling steps one by one would make the intervals too narrow.
Every figure is a function of per-trajectory counts (a confusion matrix, and whether the
first error was found), so one resample is a weighted sum of those counts and all of
them are one matrix product. The point estimates are the same sums with weight one, and
equal :mod:`metrics.agreement`'s (a test holds them to it). Seeded, so the page shows the
same interval every time.
"""

# Django-free: alignment figures from arrays.
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from evaluation.compare_metrics import Scale, StepRows, finite
from metrics import agreement

RESAMPLES = 1000
LEVEL = 0.95
# Resampled trajectory weights held at a time (resamples x trajectories cells).
BLOCK_CELLS = 2_000_000


@dataclass(frozen=True)
class Estimate:
    """A figure and its bootstrap interval (NaN where undefined)."""

    value: float
    low: float
    high: float

    def as_json(self) -> dict[str, Any]:
        return {"value": finite(self.value), "low": finite(self.low), "high": finite(self.high)}


@dataclass(frozen=True)
class VersionFigures:
    steps: int
    trajectories: int
    confusion: NDArray[np.int64]
    kappa: Estimate
    bad_f1: Estimate
    first_error_f1: Estimate

    def as_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "trajectories": self.trajectories,
            "confusion": self.confusion.tolist(),
            "kappa": self.kappa.as_json(),
            "bad_step_f1": self.bad_f1.as_json(),
            "first_error_f1": self.first_error_f1.as_json(),
        }


def _figures(
    weights: NDArray[np.float64],
    confusion: NDArray[np.float64],
    erroneous: NDArray[np.float64],
    hit: NDArray[np.float64],
    bad: int,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Kappa, bad-step F1 and first-error F1 for each row of ``weights`` (how many times
    each trajectory is counted)."""
    k = math.isqrt(confusion.shape[1])
    cells = (weights @ confusion).reshape(-1, k, k)
    total = cells.sum(axis=(1, 2))
    rows = cells.sum(axis=2)
    columns = cells.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        observed = np.trace(cells, axis1=1, axis2=2) / total
        expected = (rows * columns).sum(axis=1) / total**2
        kappa = np.where(expected < 1, (observed - expected) / (1 - expected), np.nan)
        tp = cells[:, bad, bad]
        fp = columns[:, bad] - tp
        fn = rows[:, bad] - tp
        denominator = 2 * tp + fp + fn
        f1 = np.where(denominator > 0, 2 * tp / np.where(denominator > 0, denominator, 1), 0.0)
        n_err = weights @ erroneous
        n_cor = weights @ (1 - erroneous)
        acc_err = (weights @ (erroneous * hit)) / n_err
        acc_cor = (weights @ ((1 - erroneous) * hit)) / n_cor
        harmonic = np.where(acc_err + acc_cor > 0, 2 * acc_err * acc_cor / (acc_err + acc_cor), 0.0)
    first = np.where(np.isnan(acc_err) | np.isnan(acc_cor), np.nan, harmonic)
    return kappa, f1, first


def _codes(labels: NDArray[np.float64], values: tuple[int, ...]) -> NDArray[np.int64]:
    """Each label's position in ``values`` (every label must be one of them)."""
    codes = np.full(labels.size, -1, dtype=np.int64)
    for position, value in enumerate(values):
        codes[labels == value] = position
    if np.any(codes < 0):
        raise ValueError("a label is not on the scale")
    return codes


def _interval(samples: NDArray[np.float64], level: float) -> tuple[float, float]:
    usable = samples[np.isfinite(samples)]
    if not usable.size:
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(usable, [tail, 1.0 - tail])
    return float(low), float(high)


def version_figures(
    rows: StepRows,
    scale: Scale,
    *,
    threshold: float = 0.5,
    resamples: int = RESAMPLES,
    level: float = LEVEL,
    seed: int = 0,
) -> VersionFigures:
    """The figures of one version over ``rows`` (sorted: one per step both the judge and
    the label source judged; ``score`` the judge's 0..1 value): the judge says good where
    ``score >= threshold``, else bad."""
    predicted = agreement.scores_to_labels(
        rows.score, threshold=threshold, good=scale.good, bad=scale.bad
    )
    k = len(scale.values)
    offsets = rows.offsets()
    n = int(offsets.size - 1)
    owner = np.repeat(np.arange(n), np.diff(offsets))
    label_code = _codes(rows.label, scale.values)
    predicted_code = _codes(predicted, scale.values)
    per_trajectory = np.zeros((n, k * k), dtype=np.float64)
    np.add.at(per_trajectory, (owner, label_code * k + predicted_code), 1.0)
    reference = agreement.first_error_reference(rows.label, offsets, bad=scale.bad)
    prediction = agreement.first_error_prediction(rows.score, offsets, threshold=threshold)
    erroneous = (reference >= 0).astype(np.float64)
    hit = np.where(reference >= 0, prediction == reference, prediction == -1).astype(np.float64)
    bad = scale.values.index(scale.bad)

    point = _figures(np.ones((1, n)), per_trajectory, erroneous, hit, bad)
    samples: list[list[NDArray[np.float64]]] = [[], [], []]
    if n:
        rng = np.random.default_rng(seed)
        block = max(1, BLOCK_CELLS // n)
        for start in range(0, resamples, block):
            count = min(block, resamples - start)
            picks = rng.integers(0, n, size=(count, n))
            cells = (picks + (np.arange(count) * n)[:, None]).ravel()
            weights = np.bincount(cells, minlength=count * n).reshape(count, n).astype(np.float64)
            for i, part in enumerate(_figures(weights, per_trajectory, erroneous, hit, bad)):
                samples[i].append(part)
    estimates = []
    for i in range(3):
        drawn = np.concatenate(samples[i]) if samples[i] else np.zeros(0)
        low, high = _interval(drawn, level)
        estimates.append(Estimate(float(point[i][0]), low, high))
    confusion = per_trajectory.sum(axis=0).reshape(k, k).astype(np.int64)
    return VersionFigures(
        steps=len(rows),
        trajectories=n,
        confusion=confusion,
        kappa=estimates[0],
        bad_f1=estimates[1],
        first_error_f1=estimates[2],
    )
