"""The numbers on the compare page, from arrays pulled out of the database (no Django).

:mod:`evaluation.compare` pulls one row per labelable step that has both a reference label
and a score (trajectory id, step index, label, score and a slice code) and hands them here
as :class:`StepRows`; everything below is :mod:`metrics.agreement` applied to them, per
slice where asked, plus the outcome-against-process summaries built from per-trajectory
and per-position aggregates that PostgreSQL computed. Results are dataclasses with a
``as_json()`` that turns NaN into ``None``.
"""

# Django-free: the compare page's numbers from arrays.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from metrics import agreement

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Trajectory length buckets (by step count) and step position buckets (by 0-based index):
# each bucket starts at its edge and ends before the next. The SQL side buckets with
# ``width_bucket(x, ARRAY[edges[1:]])``, which gives the bucket's position in this list.
LENGTH_EDGES = (1, 6, 11, 21, 51, 101, 201)
POSITION_EDGES = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 30, 50, 100, 200)
CALIBRATION_BINS = 10


def bucket_names(edges: Sequence[int]) -> list[str]:
    """``["1-5", "6-10", ..., "201+"]``: one name per bucket, single values as themselves."""
    names = []
    for i, low in enumerate(edges):
        if i + 1 == len(edges):
            names.append(f"{low}+")
        elif edges[i + 1] - low == 1:
            names.append(str(low))
        else:
            names.append(f"{low}-{edges[i + 1] - 1}")
    return names


def finite(value: float | None) -> float | None:
    """A float for JSON: NaN and infinities become ``None``."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Scale:
    """The label values being compared, in the schema's order, and which of them a model's
    "bad" and "good" stand for (a scorer says only one or the other)."""

    values: tuple[int, ...]
    names: tuple[str, ...]
    bad: int
    good: int
    ordinal: bool  # ternary and ordinal scales: quadratic kappa, ordinal alpha

    def position(self, value: float) -> float:
        """A label on the score's 0..1 scale: bad 0, good 1, neutral halfway."""
        low, high = min(self.values), max(self.values)
        return (value - low) / (high - low) if high > low else 1.0

    def name(self, value: int) -> str:
        return self.names[self.values.index(value)] if value in self.values else str(value)


@dataclass(frozen=True)
class StepRows:
    """One row per step, sorted by trajectory and step index (see :meth:`sort`)."""

    trajectory: IntArray
    index: IntArray
    label: FloatArray
    score: FloatArray
    group: IntArray

    @classmethod
    def empty(cls) -> StepRows:
        return cls(
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0),
            np.zeros(0),
            np.zeros(0, np.int64),
        )

    def __len__(self) -> int:
        return int(self.trajectory.size)

    def sort(self) -> StepRows:
        """By trajectory, then step index. Rows often arrive in order already (merge
        joins along the ids), which a linear check finds."""
        step = np.diff(self.trajectory)
        if np.all((step > 0) | ((step == 0) & (np.diff(self.index) > 0))):
            return self
        return self.take(np.lexsort((self.index, self.trajectory)))

    def take(self, which: NDArray[Any]) -> StepRows:
        return StepRows(
            self.trajectory[which],
            self.index[which],
            self.label[which],
            self.score[which],
            self.group[which],
        )

    def offsets(self) -> IntArray:
        """CSR offsets of the trajectories (rows must be sorted)."""
        if not len(self):
            return np.zeros(1, dtype=np.int64)
        starts = np.flatnonzero(np.diff(self.trajectory)) + 1
        return np.concatenate([[0], starts, [len(self)]]).astype(np.int64)


# --- Model against humans -----------------------------------------------------------------


@dataclass(frozen=True)
class Metrics:
    steps: int
    trajectories: int
    threshold: float
    confusion: IntArray  # rows: reference label, columns: the model's, in scale order
    kappa: float
    kappa_quadratic: float | None
    accuracy: float
    detection: agreement.Detection
    auroc: float
    reliability: agreement.Reliability | None
    first_error: agreement.FirstErrorMetrics
    sweep: agreement.FirstErrorSweep | None

    def as_json(self, scale: Scale) -> dict[str, Any]:
        data: dict[str, Any] = {
            "steps": self.steps,
            "trajectories": self.trajectories,
            "threshold": self.threshold,
            "values": list(scale.values),
            "names": list(scale.names),
            "confusion": self.confusion.tolist(),
            "kappa": finite(self.kappa),
            "kappa_quadratic": finite(self.kappa_quadratic),
            "accuracy": finite(self.accuracy),
            "bad_steps": {
                "precision": finite(self.detection.precision),
                "recall": finite(self.detection.recall),
                "f1": finite(self.detection.f1),
                "true_positives": self.detection.true_positives,
                "false_positives": self.detection.false_positives,
                "false_negatives": self.detection.false_negatives,
            },
            "auroc": finite(self.auroc),
            "calibration": None,
            "first_error": first_error_json(self.first_error),
        }
        if self.reliability is not None:
            r = self.reliability
            data["calibration"] = {
                "ece": finite(r.ece),
                "bins": [
                    {
                        "low": finite(r.edges[i]),
                        "high": finite(r.edges[i + 1]),
                        "count": int(r.counts[i]),
                        "mean_score": finite(r.mean_predicted[i]),
                        "share_good": finite(r.observed[i]),
                    }
                    for i in range(r.counts.size)
                ],
            }
        if self.sweep is not None:
            data["first_error_sweep"] = {
                "best": first_error_json(self.sweep.best) if self.sweep.best else None,
                "thresholds": [finite(t) for t in self.sweep.thresholds],
                "f1": [finite(v) for v in self.sweep.f1],
                "acc_erroneous": [finite(v) for v in self.sweep.acc_erroneous],
                "acc_correct": [finite(v) for v in self.sweep.acc_correct],
            }
        return data


def first_error_json(metrics: agreement.FirstErrorMetrics) -> dict[str, Any]:
    return {
        "threshold": finite(metrics.threshold),
        "acc_erroneous": finite(metrics.acc_erroneous),
        "acc_correct": finite(metrics.acc_correct),
        "f1": finite(metrics.f1),
        "trajectories": metrics.trajectories,
        "erroneous": metrics.erroneous,
        "correct": metrics.correct,
    }


def model_human_metrics(
    rows: StepRows, scale: Scale, *, threshold: float, sweep: bool = True
) -> Metrics:
    """Everything the compare page shows for one set of steps: the confusion of the
    reference labels with the model's (``score >= threshold`` good, else bad), kappa,
    accuracy, bad-step detection, AUROC and calibration over the good and bad steps
    (neutral ones left out), and ProcessBench's first-error metrics at ``threshold``
    and, with ``sweep``, over every threshold. ``rows`` must be sorted."""
    predicted = agreement.scores_to_labels(
        rows.score, threshold=threshold, good=scale.good, bad=scale.bad
    )
    confusion = agreement.confusion_matrix(rows.label, predicted, scale.values)
    decided = (rows.label == scale.good) | (rows.label == scale.bad)
    good = rows.label[decided] == scale.good
    reliability = None
    if decided.any():
        reliability = agreement.reliability(
            rows.score[decided], good.astype(np.float64), bins=CALIBRATION_BINS
        )
    offsets = rows.offsets()
    reference = agreement.first_error_reference(rows.label, offsets, bad=scale.bad)
    prediction = agreement.first_error_prediction(rows.score, offsets, threshold=threshold)
    return Metrics(
        steps=len(rows),
        trajectories=int(offsets.size - 1),
        threshold=threshold,
        confusion=confusion,
        kappa=agreement.kappa_from_confusion(confusion),
        kappa_quadratic=(
            agreement.kappa_from_confusion(confusion, weights="quadratic")
            if scale.ordinal
            else None
        ),
        accuracy=agreement.accuracy(rows.label, predicted),
        detection=agreement.bad_step_detection(rows.label, predicted, bad=scale.bad),
        auroc=agreement.auroc(rows.score[decided], good),
        reliability=reliability,
        first_error=agreement.first_error_metrics(prediction, reference, threshold=threshold),
        sweep=agreement.first_error_sweep(rows.score, offsets, reference) if sweep else None,
    )


@dataclass(frozen=True)
class SliceRow:
    """One value of a slice dimension and the headline metrics over its steps."""

    value: str
    name: str
    steps: int
    trajectories: int
    accuracy: float
    kappa: float
    auroc: float
    bad_f1: float
    first_error_f1: float

    def as_json(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "name": self.name,
            "steps": self.steps,
            "trajectories": self.trajectories,
            "accuracy": finite(self.accuracy),
            "kappa": finite(self.kappa),
            "auroc": finite(self.auroc),
            "bad_f1": finite(self.bad_f1),
            "first_error_f1": finite(self.first_error_f1),
        }


def slice_rows(
    rows: StepRows,
    scale: Scale,
    groups: Sequence[tuple[str, str]],
    *,
    threshold: float,
) -> list[SliceRow]:
    """Headline metrics per group: ``rows.group`` holds each step's position in
    ``groups`` (``(value, name)`` pairs); groups without steps are left out. The order of
    ``rows`` is kept inside each group, so a sorted input stays sorted."""
    if not len(rows):
        return []
    order = np.argsort(rows.group, kind="stable")
    codes = rows.group[order]
    starts = np.flatnonzero(np.r_[True, np.diff(codes) != 0])
    ends = np.r_[starts[1:], codes.size]
    result = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        code = int(codes[start])
        if not 0 <= code < len(groups):
            continue
        part = rows.take(order[start:end])
        metrics = model_human_metrics(part, scale, threshold=threshold, sweep=False)
        value, name = groups[code]
        result.append(
            SliceRow(
                value=value,
                name=name,
                steps=metrics.steps,
                trajectories=metrics.trajectories,
                accuracy=metrics.accuracy,
                kappa=metrics.kappa,
                auroc=metrics.auroc,
                bad_f1=metrics.detection.f1,
                first_error_f1=metrics.first_error.f1,
            )
        )
    return result


# --- Outcome against process --------------------------------------------------------------


@dataclass(frozen=True)
class CurvePoint:
    """Mean step score over the steps of one bucket, overall and by outcome."""

    bucket: int
    name: str
    steps: int
    mean: float
    mean_success: float
    mean_failure: float

    def as_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "name": self.name,
            "steps": self.steps,
            "mean": finite(self.mean),
            "mean_success": finite(self.mean_success),
            "mean_failure": finite(self.mean_failure),
        }


@dataclass(frozen=True)
class OutcomeProcess:
    """How well the trajectory's aggregated step scores predict its outcome (AUROC of
    min / mean / last against success), and the mean step score by trajectory length and
    by step position, so a scorer that rewards length or drifts is visible."""

    trajectories: int
    successes: int
    failures: int
    auroc: dict[str, float]
    by_length: list[CurvePoint] = field(default_factory=list)
    by_position: list[CurvePoint] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "successes": self.successes,
            "failures": self.failures,
            "auroc": {name: finite(value) for name, value in self.auroc.items()},
            "by_length": [p.as_json() for p in self.by_length],
            "by_position": [p.as_json() for p in self.by_position],
        }


@dataclass(frozen=True)
class TrajectoryOutcomes:
    """Trajectories sorted by id, each with its outcome (1 success, 0 failure, -1
    unknown) and its length bucket (an index into :data:`LENGTH_EDGES`)."""

    trajectory: IntArray
    outcome: IntArray
    length_bucket: IntArray


def outcome_process(rows: StepRows, trajectories: TrajectoryOutcomes) -> OutcomeProcess:
    """From every scored step (sorted ``rows``, labelled or not): each trajectory's min,
    mean and last step score against its outcome, and the mean step score by trajectory
    length and by step position (split by outcome). Trajectories missing from
    ``trajectories`` count as of unknown outcome."""
    offsets = rows.offsets()
    starts, ends = offsets[:-1], offsets[1:]
    if len(rows):
        minimum = np.minimum.reduceat(rows.score, starts)
        total = np.add.reduceat(rows.score, starts)
        last = rows.score[ends - 1]
        ids = rows.trajectory[starts]
    else:
        minimum = total = last = np.zeros(0)
        ids = np.zeros(0, dtype=np.int64)
    steps = np.diff(offsets)
    outcome = np.full(ids.size, -1, dtype=np.int64)
    length = np.zeros(ids.size, dtype=np.int64)
    if trajectories.trajectory.size and ids.size:
        at = np.minimum(
            np.searchsorted(trajectories.trajectory, ids), trajectories.trajectory.size - 1
        )
        known = trajectories.trajectory[at] == ids
        outcome[known] = trajectories.outcome[at[known]]
        length[known] = trajectories.length_bucket[at[known]]

    decided = outcome >= 0
    success = outcome[decided] == 1
    aurocs = {
        name: agreement.auroc(values[decided], success)
        for name, values in (
            ("min", minimum),
            ("mean", total / np.maximum(steps, 1)),
            ("last", last),
        )
    }
    step_outcome = np.repeat(outcome, steps)
    position = np.searchsorted(np.asarray(POSITION_EDGES[1:]), rows.index, side="right")
    return OutcomeProcess(
        trajectories=int(ids.size),
        successes=int(success.sum()),
        failures=int((~success).sum()),
        auroc=aurocs,
        by_length=_curve(bucket_names(LENGTH_EDGES), length, outcome, steps, total),
        by_position=_curve(
            bucket_names(POSITION_EDGES),
            position.astype(np.int64),
            step_outcome,
            np.ones(len(rows), dtype=np.int64),
            rows.score,
        ),
    )


def _curve(
    names: list[str], bucket: IntArray, outcome: IntArray, steps: IntArray, score_sum: FloatArray
) -> list[CurvePoint]:
    k = len(names)
    bucket = np.clip(bucket, 0, k - 1)

    def per_bucket(mask: NDArray[np.bool_]) -> tuple[FloatArray, FloatArray]:
        n = np.bincount(bucket[mask], weights=steps[mask], minlength=k).astype(np.float64)
        total = np.bincount(bucket[mask], weights=score_sum[mask], minlength=k).astype(np.float64)
        return n, total

    everything = np.ones(bucket.size, dtype=bool)
    n_all, sum_all = per_bucket(everything)
    n_ok, sum_ok = per_bucket(outcome == 1)
    n_bad, sum_bad = per_bucket(outcome == 0)
    points = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(k):
            if n_all[i] == 0:
                continue
            points.append(
                CurvePoint(
                    bucket=i,
                    name=names[i],
                    steps=int(n_all[i]),
                    mean=float(sum_all[i] / n_all[i]),
                    mean_success=float(sum_ok[i] / n_ok[i]) if n_ok[i] else math.nan,
                    mean_failure=float(sum_bad[i] / n_bad[i]) if n_bad[i] else math.nan,
                )
            )
    return points


# --- Between humans -----------------------------------------------------------------------


@dataclass(frozen=True)
class HumanAgreement:
    """Agreement among the human annotators: over the steps at least two of them
    labelled (percent agreement, kappa per pair, Krippendorff's alpha), and each
    annotator against the adjudicated labels."""

    labels: int
    annotators: list[str]
    overlap_steps: int
    percent_agreement: float
    alpha: float
    alpha_level: str
    pairs: list[agreement.PairAgreement]
    with_adjudicated: list[agreement.AnnotatorAgreement]
    # The label schema (by name) whose labels were compared.
    schema: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema or None,
            "labels": self.labels,
            "annotators": self.annotators,
            "overlap_steps": self.overlap_steps,
            "percent_agreement": finite(self.percent_agreement),
            "alpha": finite(self.alpha),
            "alpha_level": self.alpha_level,
            "pairs": [
                {
                    "first": p.first,
                    "second": p.second,
                    "steps": p.steps,
                    "agreement": finite(p.agreement),
                    "kappa": finite(p.kappa),
                }
                for p in self.pairs
            ],
            "with_adjudicated": [
                {
                    "annotator": a.annotator,
                    "steps": a.steps,
                    "agreement": finite(a.agreement),
                    "kappa": finite(a.kappa),
                }
                for a in self.with_adjudicated
            ],
        }


def human_agreement(
    step: IntArray,
    annotator: IntArray,
    value: FloatArray,
    names: Sequence[str],
    scale: Scale,
    *,
    final_step: IntArray,
    final_value: FloatArray,
) -> HumanAgreement:
    """From one row per human label (step id, annotator position in ``names``, value)
    and the adjudicated labels (step id, value)."""
    level: agreement.AlphaLevel = "ordinal" if scale.ordinal else "nominal"
    _, column, per_step = np.unique(step, return_inverse=True, return_counts=True)
    shared = per_step[column] >= 2
    overlap_steps, overlap_column = np.unique(step[shared], return_inverse=True)
    ratings = _ratings(
        len(names), overlap_steps.size, annotator[shared], overlap_column, value[shared]
    )
    labels = scale.values
    pairs = []
    if overlap_steps.size:
        pairs = [
            p for p in agreement.pairwise_kappa(ratings, list(names), labels=labels) if p.steps > 0
        ]
    percent = agreement.percent_agreement(ratings) if overlap_steps.size else math.nan
    alpha = (
        agreement.krippendorff_alpha(ratings, level=level, labels=labels)
        if overlap_steps.size
        else math.nan
    )

    with_adjudicated: list[agreement.AnnotatorAgreement] = []
    adjudicated = np.isin(step, final_step)
    if adjudicated.any():
        final_steps, final_column = np.unique(step[adjudicated], return_inverse=True)
        reference = np.full(final_steps.size, np.nan)
        at = np.searchsorted(final_steps, final_step)
        known = (at < final_steps.size) & (
            final_steps[np.minimum(at, final_steps.size - 1)] == final_step
        )
        reference[at[known]] = final_value[known]
        matrix = _ratings(
            len(names), final_steps.size, annotator[adjudicated], final_column, value[adjudicated]
        )
        with_adjudicated = [
            a
            for a in agreement.agreement_with_reference(
                matrix, reference, list(names), labels=labels
            )
            if a.steps > 0
        ]
    return HumanAgreement(
        labels=int(step.size),
        annotators=list(names),
        overlap_steps=int(overlap_steps.size),
        percent_agreement=percent,
        alpha=alpha,
        alpha_level=level,
        pairs=pairs,
        with_adjudicated=with_adjudicated,
    )


def _ratings(
    annotators: int, steps: int, row: IntArray, column: IntArray, value: FloatArray
) -> FloatArray:
    matrix = np.full((annotators, steps), np.nan)
    matrix[row, column] = value
    return matrix
