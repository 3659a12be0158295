"""Held-out metrics for a step scorer, on plain arrays: AUROC, F1 for finding bad steps,
and ProcessBench's first-error F1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def auroc(scores: Sequence[float] | np.ndarray, positive: Sequence[bool] | np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count
    half). ``nan`` when one class is missing."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_scores = s[order]
    start = 0
    while start < len(s):
        end = start
        while end + 1 < len(s) and sorted_scores[end + 1] == sorted_scores[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def f1(predicted: Sequence[bool] | np.ndarray, actual: Sequence[bool] | np.ndarray) -> float:
    p = np.asarray(predicted, dtype=bool)
    a = np.asarray(actual, dtype=bool)
    true_positive = int((p & a).sum())
    if true_positive == 0:
        return 0.0
    precision = true_positive / int(p.sum())
    recall = true_positive / int(a.sum())
    return 2 * precision * recall / (precision + recall)


def first_below(values: Sequence[float], threshold: float) -> int:
    """Index of the first value under ``threshold``, or -1 (ProcessBench's "no error")."""
    for index, value in enumerate(values):
        if value < threshold:
            return index
    return -1


def processbench_f1(predicted: Sequence[int], actual: Sequence[int]) -> dict[str, float]:
    """ProcessBench: accuracy of the first-error index on solutions with an error, on
    those without (-1), and their harmonic mean."""
    pairs = list(zip(predicted, actual, strict=True))
    wrong = [p == a for p, a in pairs if a != -1]
    right = [p == a for p, a in pairs if a == -1]
    error_accuracy = sum(wrong) / len(wrong) if wrong else float("nan")
    correct_accuracy = sum(right) / len(right) if right else float("nan")
    if not wrong or not right or error_accuracy + correct_accuracy == 0:
        harmonic = 0.0 if wrong and right else float("nan")
    else:
        harmonic = 2 * error_accuracy * correct_accuracy / (error_accuracy + correct_accuracy)
    return {
        "processbench_f1": harmonic,
        "processbench_error_accuracy": error_accuracy,
        "processbench_correct_accuracy": correct_accuracy,
    }
