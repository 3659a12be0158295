"""Agreement statistics: model against human step labels, and humans among themselves.

Labels are numbers, as the schemas store them (ternary -1 / 0 / +1, binary, ordinal
scales, or codes of a categorical schema), passed as numpy arrays with NaN where a step
has no label. ``labels`` always means the schema's values in the schema's order; passing
them keeps classes nobody used visible (the neutral class is the hard one, and an empty
row says so) and fixes the order the weighted kappa and the ordinal alpha read.

Model scores are probabilities that a step is correct. Many trajectories are passed at
once as a flat per-step array plus CSR ``offsets`` (trajectory *i* owns
``steps[offsets[i]:offsets[i + 1]]``), as in :mod:`metrics.arrays`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
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
    ratio,
    segment_min,
)

KappaWeights = Literal["linear", "quadratic"] | None
AlphaLevel = Literal["nominal", "ordinal", "interval"]

# The thresholds a first-error sweep tries unless told otherwise: 0.00, 0.01, ..., 1.00.
DEFAULT_THRESHOLDS = np.round(np.linspace(0.0, 1.0, 101), 2)
DEFAULT_THRESHOLDS.setflags(write=False)


def _paired(reference: ArrayLike, predicted: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """The two label arrays with every pair where either side is missing dropped."""
    a = flat(reference, "reference")
    b = flat(predicted, "predicted")
    if a.shape != b.shape:
        raise ValueError("both label arrays need one entry per step")
    both = ~(np.isnan(a) | np.isnan(b))
    return a[both], b[both]


def _schema(labels: Sequence[float] | ArrayLike | None, *observed: FloatArray) -> FloatArray:
    if labels is not None:
        values = flat(labels, "labels")
        if np.unique(values).size != values.size:
            raise ValueError("labels must not repeat")
        return values
    present = np.concatenate([o[~np.isnan(o)] for o in observed]) if observed else np.array([])
    return np.unique(present)


def _codes(values: FloatArray, labels: FloatArray) -> IntArray:
    """Position of each (non-missing) value in ``labels``."""
    if not labels.size:
        if values.size:
            raise ValueError("there are labels but the schema has no values")
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(labels, kind="stable")
    ordered = labels[order]
    at = np.searchsorted(ordered, values)
    clipped = np.minimum(at, labels.size - 1)
    known = (at < labels.size) & (ordered[clipped] == values)
    if not np.all(known):
        unknown = values[~known][0]
        raise ValueError(f"label {unknown:g} is not one of the schema's values {labels.tolist()}")
    return order[clipped].astype(np.int64)


# Model against humans ---------------------------------------------------------------------


def scores_to_labels(
    scores: ArrayLike, *, threshold: float, good: float = 1, bad: float = -1
) -> FloatArray:
    """A scorer's labels: ``good`` where the score is at least ``threshold``, else ``bad``.

    A scorer never says neutral, so in a confusion matrix over a ternary schema the neutral
    column is empty and the neutral row shows how the model splits what humans left open.
    Unscored steps (NaN) stay NaN.
    """
    s = flat(scores, "scores")
    labels = np.where(s >= threshold, float(good), float(bad))
    labels[np.isnan(s)] = np.nan
    return labels


def confusion_matrix(
    reference: ArrayLike, predicted: ArrayLike, labels: Sequence[float] | ArrayLike | None = None
) -> IntArray:
    """Counts of (reference, predicted) label pairs: rows are the reference (human) labels,
    columns the predicted ones, both in the order of ``labels``. Pairs with a missing side
    are skipped."""
    a, b = _paired(reference, predicted)
    values = _schema(labels, a, b)
    k = values.size
    cells = _codes(a, values) * k + _codes(b, values)
    return np.bincount(cells, minlength=k * k).reshape(k, k).astype(np.int64)


def kappa_from_confusion(matrix: ArrayLike, *, weights: KappaWeights = None) -> float:
    """Cohen's kappa of a square confusion matrix, optionally with linear or quadratic
    disagreement weights over the row/column order (for ordinal schemas). NaN when chance
    agreement is perfect (both raters always gave one and the same label)."""
    counts = np.asarray(matrix, dtype=np.float64)
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1]:
        raise ValueError("a confusion matrix must be square")
    total = counts.sum()
    if total == 0:
        return float("nan")
    k = counts.shape[0]
    distance = np.abs(np.subtract.outer(np.arange(k), np.arange(k))).astype(np.float64)
    if weights is None:
        penalty = (distance > 0).astype(np.float64)
    elif weights == "linear":
        penalty = distance
    elif weights == "quadratic":
        penalty = distance**2
    else:
        raise ValueError(f"unknown kappa weights {weights!r}")
    observed = counts / total
    expected = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / total**2
    return 1.0 - ratio(float(np.sum(penalty * observed)), float(np.sum(penalty * expected)))


def cohen_kappa(
    reference: ArrayLike,
    predicted: ArrayLike,
    labels: Sequence[float] | ArrayLike | None = None,
    *,
    weights: KappaWeights = None,
) -> float:
    """Cohen's kappa between two label arrays (plain, or weighted for ordinal schemas)."""
    return kappa_from_confusion(confusion_matrix(reference, predicted, labels), weights=weights)


def accuracy(reference: ArrayLike, predicted: ArrayLike) -> float:
    """Share of steps, among those both sides labelled, on which the labels are equal."""
    a, b = _paired(reference, predicted)
    return float(np.mean(a == b)) if a.size else float("nan")


@dataclass(frozen=True)
class Detection:
    """How well the predicted labels find the reference's bad steps."""

    precision: float
    recall: float
    f1: float
    true_positives: int
    false_positives: int
    false_negatives: int


def bad_step_detection(reference: ArrayLike, predicted: ArrayLike, *, bad: float = -1) -> Detection:
    """Precision, recall and F1 with "bad step" as the positive class. A ratio with nothing
    to divide by is 0, as scikit-learn reports it."""
    a, b = _paired(reference, predicted)
    tp = int(np.sum((a == bad) & (b == bad)))
    fp = int(np.sum((a != bad) & (b == bad)))
    fn = int(np.sum((a == bad) & (b != bad)))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Detection(precision, recall, f1, tp, fp, fn)


def _midranks(values: FloatArray) -> FloatArray:
    """Ranks 1..n, tied values sharing the mean of the ranks they span."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2.0)[inverse.reshape(-1)]


def auroc(scores: ArrayLike, positive: ArrayLike) -> float:
    """Area under the ROC curve: the chance that a positive step outscores a negative one,
    ties counting half (the Mann-Whitney U statistic over n_pos * n_neg).

    For PRM scores against human labels pass ``positive = labels == 1`` over the steps
    labelled good or bad (neutral steps left out): a score that ranks every good step above
    every bad one gets 1. Steps without a score are skipped; NaN when a class is empty.
    """
    s = flat(scores, "scores")
    y = np.asarray(positive, dtype=bool)
    if y.shape != s.shape:
        raise ValueError("positive needs one entry per score")
    scored = ~np.isnan(s)
    s, y = s[scored], y[scored]
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if not n_pos or not n_neg:
        return float("nan")
    u = float(_midranks(s)[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


@dataclass(frozen=True)
class Reliability:
    """A reliability curve over equal-width bins of the predicted probability.

    Bin *i* holds probabilities in ``[edges[i], edges[i + 1])``, the last bin also 1.0.
    ``mean_predicted`` and ``observed`` (the share of positive outcomes) are NaN for empty
    bins. ``ece`` is the expected calibration error, ``sum_i counts_i / n *
    |observed_i - mean_predicted_i|``.
    """

    edges: FloatArray
    counts: IntArray
    mean_predicted: FloatArray
    observed: FloatArray
    ece: float


def reliability(probabilities: ArrayLike, outcomes: ArrayLike, *, bins: int = 10) -> Reliability:
    """Reliability curve and expected calibration error of probabilities against 0/1
    outcomes (for step scores: good = 1, bad = 0, neutral left out)."""
    p = flat(probabilities, "probabilities")
    y = flat(outcomes, "outcomes")
    if y.shape != p.shape:
        raise ValueError("outcomes need one entry per probability")
    if bins < 1:
        raise ValueError("bins must be at least 1")
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError("probabilities must lie in [0, 1]")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("outcomes must be 0 or 1")
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.minimum(np.searchsorted(edges, p, side="right") - 1, bins - 1)
    counts = np.bincount(index, minlength=bins).astype(np.int64)
    predicted_sum = np.bincount(index, weights=p, minlength=bins)
    observed_sum = np.bincount(index, weights=y, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_predicted = np.where(counts > 0, predicted_sum / counts, np.nan)
        observed = np.where(counts > 0, observed_sum / counts, np.nan)
    ece = ratio(float(np.abs(observed_sum - predicted_sum).sum()), float(p.size))
    return Reliability(edges, counts, mean_predicted, observed, ece)


# ProcessBench first-error metrics ---------------------------------------------------------


def first_error_reference(labels: ArrayLike, offsets: ArrayLike, *, bad: float = -1) -> IntArray:
    """Per trajectory, the index of the first step labelled ``bad``, or -1 if none."""
    values = flat(labels, "labels")
    return first_flagged(values == bad, checked_offsets(offsets, values.size))


def first_error_prediction(
    scores: ArrayLike,
    offsets: ArrayLike,
    *,
    threshold: float,
    labelable: ArrayLike | None = None,
) -> IntArray:
    """Per trajectory, the index of the first labelable step whose score is under
    ``threshold``, or -1 if none. Unscored steps (NaN) never count."""
    s = flat(scores, "scores")
    bounds = checked_offsets(offsets, s.size)
    flagged = s < threshold
    if labelable is not None:
        flagged &= _labelable(labelable, s.size)
    return first_flagged(flagged, bounds)


def _labelable(labelable: ArrayLike, n_steps: int) -> NDArray[np.bool_]:
    mask = np.asarray(labelable, dtype=bool)
    if mask.shape != (n_steps,):
        raise ValueError("labelable needs one entry per step")
    return mask


@dataclass(frozen=True)
class FirstErrorMetrics:
    """ProcessBench's metrics: accuracy on erroneous trajectories (the predicted first error
    is the reference one), on correct trajectories (both -1), and their harmonic mean."""

    threshold: float | None
    acc_erroneous: float
    acc_correct: float
    f1: float
    erroneous: int
    correct: int

    @property
    def trajectories(self) -> int:
        return self.erroneous + self.correct


def _harmonic(a: float, b: float) -> float:
    if np.isnan(a) or np.isnan(b):
        return float("nan")
    return 2 * a * b / (a + b) if a + b else 0.0


def first_error_metrics(
    predicted: ArrayLike, reference: ArrayLike, *, threshold: float | None = None
) -> FirstErrorMetrics:
    """ProcessBench metrics from predicted and reference first-error indices (-1 = none).
    An accuracy over no trajectories is NaN, and so is the F1 then."""
    pred = np.asarray(predicted, dtype=np.int64)
    ref = np.asarray(reference, dtype=np.int64)
    if pred.shape != ref.shape or pred.ndim != 1:
        raise ValueError("predicted and reference need one index per trajectory")
    erroneous = ref >= 0
    n_err = int(erroneous.sum())
    n_cor = ref.size - n_err
    acc_err = ratio(float(np.sum(pred[erroneous] == ref[erroneous])), n_err)
    acc_cor = ratio(float(np.sum(pred[~erroneous] == -1)), n_cor)
    return FirstErrorMetrics(threshold, acc_err, acc_cor, _harmonic(acc_err, acc_cor), n_err, n_cor)


@dataclass(frozen=True)
class FirstErrorSweep:
    """ProcessBench metrics at every threshold tried, and the threshold with the best F1
    (the lowest one among ties; None when no threshold has a defined F1)."""

    thresholds: FloatArray
    acc_erroneous: FloatArray
    acc_correct: FloatArray
    f1: FloatArray
    best: FirstErrorMetrics | None


def first_error_sweep(
    scores: ArrayLike,
    offsets: ArrayLike,
    reference: ArrayLike,
    *,
    thresholds: ArrayLike | None = None,
    labelable: ArrayLike | None = None,
) -> FirstErrorSweep:
    """ProcessBench metrics for many thresholds at once.

    A trajectory is judged right on an interval of thresholds: an erroneous one (first
    error at step r) when ``score_r < t <= min(earlier labelable scores)``, a correct one
    when ``t <= min(all labelable scores)``. Counting intervals that contain each threshold
    with sorted endpoints costs O((trajectories + thresholds) log) after one pass over the
    steps, instead of one pass per threshold.
    """
    s = flat(scores, "scores")
    bounds = checked_offsets(offsets, s.size)
    ref = np.asarray(reference, dtype=np.int64)
    lengths = np.diff(bounds)
    if ref.shape != lengths.shape:
        raise ValueError("reference needs one first-error index per trajectory")
    if np.any(ref >= lengths) or np.any(ref < -1):
        raise ValueError("a reference first error lies outside its trajectory")
    tried = flat(DEFAULT_THRESHOLDS if thresholds is None else thresholds, "thresholds")

    usable = ~np.isnan(s)
    if labelable is not None:
        usable &= _labelable(labelable, s.size)
    masked = np.where(usable, s, np.inf)
    owner = np.repeat(np.arange(lengths.size), lengths)
    local = np.arange(s.size) - bounds[owner]
    erroneous = ref >= 0

    minimum_before = segment_min(np.where(local < ref[owner], masked, np.inf), bounds)
    error_score = np.full(lengths.size, np.inf)
    error_score[erroneous] = masked[bounds[:-1][erroneous] + ref[erroneous]]
    low, high = error_score[erroneous], minimum_before[erroneous]
    right_somewhere = low < high
    low, high = np.sort(low[right_somewhere]), np.sort(high[right_somewhere])
    # Intervals (low, high] containing t: those with low < t, less those with high < t.
    hits_erroneous = np.searchsorted(low, tried, side="left") - np.searchsorted(
        high, tried, side="left"
    )
    minimum_all = np.sort(segment_min(masked, bounds)[~erroneous])
    hits_correct = minimum_all.size - np.searchsorted(minimum_all, tried, side="left")

    n_err, n_cor = int(erroneous.sum()), int((~erroneous).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_err = hits_erroneous / n_err if n_err else np.full(tried.size, np.nan)
        acc_cor = hits_correct / n_cor if n_cor else np.full(tried.size, np.nan)
        f1 = np.where(acc_err + acc_cor > 0, 2 * acc_err * acc_cor / (acc_err + acc_cor), 0.0)
    f1 = np.where(np.isnan(acc_err) | np.isnan(acc_cor), np.nan, f1)

    best = None
    if tried.size and not np.all(np.isnan(f1)):
        i = int(np.nanargmax(f1))
        best = FirstErrorMetrics(
            float(tried[i]), float(acc_err[i]), float(acc_cor[i]), float(f1[i]), n_err, n_cor
        )
    return FirstErrorSweep(tried, acc_err.astype(np.float64), acc_cor.astype(np.float64), f1, best)


# Between humans ---------------------------------------------------------------------------


def _ratings(ratings: ArrayLike) -> FloatArray:
    array = np.asarray(ratings, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError("ratings must be a 2-D array: one row per annotator, one column per step")
    return array


def _unit_counts(matrix: FloatArray, values: FloatArray) -> FloatArray:
    """Per unit (column), how many annotators gave each label value."""
    rated = ~np.isnan(matrix)
    unit = np.broadcast_to(np.arange(matrix.shape[1]), matrix.shape)[rated]
    cells = unit * values.size + _codes(matrix[rated], values)
    counts = np.bincount(cells, minlength=matrix.shape[1] * values.size)
    return counts.reshape(matrix.shape[1], values.size).astype(np.float64)


def percent_agreement(ratings: ArrayLike) -> float:
    """Share of pairs of labels given to the same step by two annotators that are equal,
    pooled over all steps with at least two labels (so over all annotator pairs, weighted
    by how many steps each pair shares). NaN when no step has two labels."""
    matrix = _ratings(ratings)
    counts = _unit_counts(matrix, _schema(None, matrix.ravel()))
    labelled = counts.sum(axis=1)
    pairs = float(np.sum(labelled * (labelled - 1))) / 2.0
    agreeing = float(np.sum(counts * (counts - 1))) / 2.0
    return ratio(agreeing, pairs)


@dataclass(frozen=True)
class PairAgreement:
    first: str
    second: str
    steps: int
    agreement: float
    kappa: float


def pairwise_kappa(
    ratings: ArrayLike,
    annotators: Sequence[str] | None = None,
    *,
    labels: Sequence[float] | ArrayLike | None = None,
    weights: KappaWeights = None,
) -> list[PairAgreement]:
    """Percent agreement and Cohen's kappa for every pair of annotators, over the steps
    both labelled. ``ratings`` has one row per annotator (NaN where they gave no label)."""
    matrix = _ratings(ratings)
    names = _names(annotators, matrix.shape[0])
    values = _schema(labels, matrix.ravel())
    pairs = []
    for i, j in itertools.combinations(range(matrix.shape[0]), 2):
        a, b = _paired(matrix[i], matrix[j])
        confusion = confusion_matrix(a, b, values)
        pairs.append(
            PairAgreement(
                names[i],
                names[j],
                int(a.size),
                accuracy(a, b),
                kappa_from_confusion(confusion, weights=weights),
            )
        )
    return pairs


@dataclass(frozen=True)
class AnnotatorAgreement:
    annotator: str
    steps: int
    agreement: float
    kappa: float


def agreement_with_reference(
    ratings: ArrayLike,
    reference: ArrayLike,
    annotators: Sequence[str] | None = None,
    *,
    labels: Sequence[float] | ArrayLike | None = None,
    weights: KappaWeights = None,
) -> list[AnnotatorAgreement]:
    """Each annotator's percent agreement and kappa with a reference labelling (the
    adjudicated labels), over the steps both have."""
    matrix = _ratings(ratings)
    ref = flat(reference, "reference")
    if ref.size != matrix.shape[1]:
        raise ValueError("reference needs one label per step")
    names = _names(annotators, matrix.shape[0])
    values = _schema(labels, matrix.ravel(), ref)
    rows = []
    for i, name in enumerate(names):
        a, b = _paired(ref, matrix[i])
        rows.append(
            AnnotatorAgreement(
                name,
                int(a.size),
                accuracy(a, b),
                kappa_from_confusion(confusion_matrix(a, b, values), weights=weights),
            )
        )
    return rows


def _names(annotators: Sequence[str] | None, n: int) -> list[str]:
    names = [str(i) for i in range(n)] if annotators is None else list(annotators)
    if len(names) != n:
        raise ValueError("annotators needs one name per row of ratings")
    return names


def krippendorff_alpha(
    ratings: ArrayLike,
    *,
    level: AlphaLevel = "nominal",
    labels: Sequence[float] | ArrayLike | None = None,
) -> float:
    """Krippendorff's alpha over any number of annotators with missing labels.

    ``ratings`` has one row per annotator and NaN where a label is missing; steps with
    fewer than two labels cannot be paired and drop out. Built from the coincidence matrix
    (Krippendorff, 2011): ``alpha = 1 - (n - 1) * sum(o * d) / sum(n_c * n_k * d)``. The
    ordinal distance between values c < k is ``(sum_(g=c..k) n_g - (n_c + n_k) / 2)**2``
    over the ``labels`` order (default: numeric order); interval uses ``(c - k)**2``. NaN
    when there is no disagreement to expect (a single value used).
    """
    matrix = _ratings(ratings)
    values = _schema(labels, matrix.ravel())
    counts = _unit_counts(matrix, values)
    labelled = counts.sum(axis=1)
    pairable = labelled >= 2
    counts, labelled = counts[pairable], labelled[pairable]
    if not counts.size:
        return float("nan")
    scaled = counts / (labelled - 1)[:, None]
    coincidence = scaled.T @ counts - np.diag(scaled.sum(axis=0))
    marginal = coincidence.sum(axis=1)
    n = float(marginal.sum())
    if level == "nominal":
        distance = 1.0 - np.eye(values.size)
    elif level == "ordinal":
        midpoint = np.cumsum(marginal) - marginal / 2.0
        distance = np.subtract.outer(midpoint, midpoint) ** 2
    elif level == "interval":
        distance = np.subtract.outer(values, values) ** 2
    else:
        raise ValueError(f"unknown level of measurement {level!r}")
    observed = float(np.sum(coincidence * distance))
    expected = float(np.sum(np.outer(marginal, marginal) * distance)) / (n - 1)
    return 1.0 - ratio(observed, expected)
