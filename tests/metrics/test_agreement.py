"""Agreement maths against hand-worked cases, scikit-learn and the krippendorff package."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest
from sklearn import calibration, metrics

from metrics.agreement import (
    DEFAULT_THRESHOLDS,
    AlphaLevel,
    KappaWeights,
    accuracy,
    agreement_with_reference,
    auroc,
    bad_step_detection,
    cohen_kappa,
    confusion_matrix,
    first_error_metrics,
    first_error_prediction,
    first_error_reference,
    first_error_sweep,
    kappa_from_confusion,
    krippendorff_alpha,
    pairwise_kappa,
    percent_agreement,
    reliability,
    scores_to_labels,
)

approx = pytest.approx
nan = np.nan
TERNARY = [-1, 0, 1]


def noisy_copy(labels: np.ndarray, keep: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.where(rng.random(labels.size) < keep, labels, rng.choice(TERNARY, labels.size))


# Model against humans ---------------------------------------------------------------------


def test_confusion_matrix_keeps_the_unused_neutral_class_visible() -> None:
    human = [-1, -1, 0, 0, 1, 1, 1, nan]
    model = [-1, 1, 1, -1, 1, 1, -1, 1]
    matrix = confusion_matrix(human, model, TERNARY)
    assert matrix.tolist() == [[1, 0, 1], [1, 0, 1], [1, 0, 2]]


def test_confusion_matrix_matches_sklearn() -> None:
    rng = np.random.default_rng(0)
    human = rng.choice(TERNARY, 300)
    model = noisy_copy(human, 0.5, seed=1)
    expected = metrics.confusion_matrix(human, model, labels=TERNARY)
    assert confusion_matrix(human, model, TERNARY).tolist() == expected.tolist()


def test_confusion_matrix_rejects_a_value_outside_the_schema() -> None:
    with pytest.raises(ValueError, match="not one of the schema's values"):
        confusion_matrix([1, 2], [1, 1], TERNARY)


def test_scores_become_good_or_bad_at_the_threshold() -> None:
    labels = scores_to_labels([0.2, 0.5, 0.9, nan], threshold=0.5)
    assert labels.tolist()[:3] == [-1, 1, 1]
    assert np.isnan(labels[3])
    assert scores_to_labels([0.2, 0.7], threshold=0.5, good=1, bad=0).tolist() == [0, 1]


def test_kappa_hand_worked() -> None:
    # p_o = 35/50, p_e = (25*30 + 25*20)/50**2 = 1/2, kappa = (0.7 - 0.5) / 0.5.
    assert kappa_from_confusion([[20, 5], [10, 15]]) == approx(0.4)
    # Human (-1, 0, 1) against model (0, 0, 1): plain 1 - (1/3)/(6/9), quadratic 1 - (1/3)/1.
    assert cohen_kappa([-1, 0, 1], [0, 0, 1], TERNARY) == approx(0.5)
    assert cohen_kappa([-1, 0, 1], [0, 0, 1], TERNARY, weights="quadratic") == approx(2 / 3)


def test_kappa_is_undefined_when_both_always_say_the_same() -> None:
    assert np.isnan(cohen_kappa([1, 1, 1], [1, 1, 1], TERNARY))


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_kappa_matches_sklearn(weights: KappaWeights) -> None:
    rng = np.random.default_rng(2)
    human = rng.choice(TERNARY, 400)
    model = noisy_copy(human, 0.6, seed=3)
    expected = metrics.cohen_kappa_score(human, model, labels=TERNARY, weights=weights)
    assert cohen_kappa(human, model, TERNARY, weights=weights) == approx(expected)


def test_accuracy_skips_unlabelled_steps() -> None:
    assert accuracy([1, -1, nan, 0], [1, 1, -1, 0]) == approx(2 / 3)


def test_bad_step_detection_hand_worked() -> None:
    human = [-1, -1, 0, 1, 1, -1]
    model = [-1, 1, -1, 1, -1, -1]
    found = bad_step_detection(human, model)
    assert (found.true_positives, found.false_positives, found.false_negatives) == (2, 2, 1)
    assert (found.precision, found.recall, found.f1) == approx((0.5, 2 / 3, 4 / 7))
    p, r, f, _ = metrics.precision_recall_fscore_support(
        human, model, labels=[-1], average=None, zero_division=0
    )
    assert (found.precision, found.recall, found.f1) == approx((p[0], r[0], f[0]))


def test_bad_step_detection_with_no_bad_prediction_scores_zero() -> None:
    found = bad_step_detection([-1, 1], [1, 1])
    assert (found.precision, found.recall, found.f1) == (0.0, 0.0, 0.0)


def test_auroc_hand_worked_with_a_tie() -> None:
    # Good {0.9, 0.8} against bad {0.8, 0.3}: 1 + 1 + 1/2 (the tie) + 1 out of 4 pairs.
    assert auroc([0.9, 0.8, 0.8, 0.3], [True, False, True, False]) == approx(0.875)
    assert auroc([0.1, 0.2, nan], [True, False, True]) == approx(0.0)
    assert np.isnan(auroc([0.1, 0.2], [True, True]))


def test_auroc_matches_sklearn_with_many_ties() -> None:
    rng = np.random.default_rng(4)
    good = rng.random(500) < 0.6
    scores = np.round(np.clip(rng.normal(0.5 + 0.2 * good, 0.25), 0, 1), 1)
    assert auroc(scores, good) == approx(metrics.roc_auc_score(good, scores))


def test_reliability_hand_worked() -> None:
    curve = reliability([0.1, 0.15, 0.5, 0.9, 1.0], [0, 1, 1, 1, 1], bins=2)
    # 0.5 opens the upper bin and 1.0 closes it.
    assert curve.edges.tolist() == [0.0, 0.5, 1.0]
    assert curve.counts.tolist() == [2, 3]
    assert curve.mean_predicted == approx([0.125, 0.8])
    assert curve.observed == approx([0.5, 1.0])
    # (|1 - 0.25| + |3 - 2.4|) / 5
    assert curve.ece == approx(0.27)


def test_reliability_leaves_empty_bins_empty_and_matches_sklearn() -> None:
    rng = np.random.default_rng(5)
    probabilities = np.concatenate([rng.uniform(0.0, 0.29, 200), rng.uniform(0.51, 0.99, 300)])
    outcomes = (rng.random(500) < probabilities).astype(float)
    curve = reliability(probabilities, outcomes, bins=10)
    assert curve.counts[3:5].tolist() == [0, 0]
    assert np.isnan(curve.observed[3]) and np.isnan(curve.mean_predicted[4])
    observed, predicted = calibration.calibration_curve(outcomes, probabilities, n_bins=10)
    filled = curve.counts > 0
    assert curve.observed[filled] == approx(observed)
    assert curve.mean_predicted[filled] == approx(predicted)
    by_hand = sum(
        n / 500 * abs(o - p)
        for n, o, p in zip(curve.counts[filled], observed, predicted, strict=True)
    )
    assert curve.ece == approx(by_hand)


# ProcessBench first-error metrics ---------------------------------------------------------

# Five trajectories as (human labels, scores) per step. Step 0 of the last is a system
# prompt: not labelable, so its low score must not count as the predicted first error.
TRAJECTORIES: list[tuple[list[float], list[float]]] = [
    ([1, 1, -1, 1], [0.9, 0.8, 0.3, 0.2]),
    ([1, 1, 1], [0.9, 0.7, 0.6]),
    ([1, -1, -1], [0.4, 0.3, 0.1]),
    ([1, 1], [0.9, 0.45]),
    ([nan, 1, -1], [0.1, 0.9, 0.2]),
]
OFFSETS = [0, 4, 7, 10, 12, 15]
LABELS = [label for labels, _ in TRAJECTORIES for label in labels]
SCORES = [score for _, scores in TRAJECTORIES for score in scores]
LABELABLE = [True] * 12 + [False, True, True]


def test_first_error_reference_and_prediction() -> None:
    assert first_error_reference(LABELS, OFFSETS).tolist() == [2, -1, 1, -1, 2]
    predicted = first_error_prediction(SCORES, OFFSETS, threshold=0.5, labelable=LABELABLE)
    assert predicted.tolist() == [2, -1, 0, 1, 2]
    assert first_error_prediction(SCORES, OFFSETS, threshold=0.5).tolist()[4] == 0


def test_processbench_metrics_on_a_known_set() -> None:
    reference = first_error_reference(LABELS, OFFSETS)
    predicted = first_error_prediction(SCORES, OFFSETS, threshold=0.5, labelable=LABELABLE)
    scores = first_error_metrics(predicted, reference, threshold=0.5)
    # Erroneous: right on 0 and 4, wrong on 2; correct: right on 1, wrong on 3.
    assert (scores.acc_erroneous, scores.acc_correct) == approx((2 / 3, 1 / 2))
    assert scores.f1 == approx(4 / 7)
    assert (scores.erroneous, scores.correct, scores.trajectories) == (3, 2, 5)


def test_processbench_accuracy_over_no_trajectories_is_undefined() -> None:
    scores = first_error_metrics([0, -1], [0, 2])
    assert scores.acc_erroneous == 0.5
    assert np.isnan(scores.acc_correct) and np.isnan(scores.f1)


def test_threshold_sweep_hand_worked() -> None:
    reference = first_error_reference(LABELS, OFFSETS)
    sweep = first_error_sweep(
        SCORES, OFFSETS, reference, thresholds=[0.2, 0.35, 0.5, 0.65], labelable=LABELABLE
    )
    # Right-threshold intervals: (0.3, 0.8], (0.3, 0.4], (0.2, 0.9] for the erroneous
    # trajectories; t <= 0.6 and t <= 0.45 for the correct ones.
    assert sweep.acc_erroneous == approx([0, 1, 2 / 3, 2 / 3])
    assert sweep.acc_correct == approx([1, 1, 1 / 2, 0])
    assert sweep.f1 == approx([0, 1, 4 / 7, 0])
    assert sweep.best is not None
    assert (sweep.best.threshold, sweep.best.f1) == (0.35, 1.0)


def test_threshold_sweep_agrees_with_one_threshold_at_a_time() -> None:
    rng = np.random.default_rng(6)
    lengths = rng.integers(0, 12, size=300)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    # Scores on the 0.01 grid make thresholds land exactly on scores: ties must agree too.
    scores = np.round(rng.random(offsets[-1]), 2)
    scores[rng.random(scores.size) < 0.05] = nan
    labelable = rng.random(scores.size) < 0.9
    reference = np.array([rng.integers(-1, n) if n else -1 for n in lengths], dtype=np.int64)
    sweep = first_error_sweep(scores, offsets, reference, labelable=labelable)
    assert sweep.thresholds.tolist() == DEFAULT_THRESHOLDS.tolist()
    for i, threshold in enumerate(sweep.thresholds):
        predicted = first_error_prediction(
            scores, offsets, threshold=float(threshold), labelable=labelable
        )
        direct = first_error_metrics(predicted, reference)
        assert sweep.acc_erroneous[i] == approx(direct.acc_erroneous)
        assert sweep.acc_correct[i] == approx(direct.acc_correct)
        assert sweep.f1[i] == approx(direct.f1)
    assert sweep.best is not None
    assert sweep.best.f1 == approx(np.nanmax(sweep.f1))


# Between humans ---------------------------------------------------------------------------

# Three annotators, four steps; NaN where an annotator gave no label.
RATINGS = np.array(
    [
        [1, 1, -1, 0],
        [1, -1, -1, nan],
        [1, 1, nan, nan],
    ]
)


def test_percent_agreement_pools_pairs_over_steps() -> None:
    # Step 0: 3 of 3 pairs agree; step 1: 1 of 3; step 2: 1 of 1; step 3 has one label.
    assert percent_agreement(RATINGS) == approx(5 / 7)


def test_pairwise_kappa_hand_worked() -> None:
    pairs = {(p.first, p.second): p for p in pairwise_kappa(RATINGS, ["ann", "bob", "cat"])}
    ann_bob = pairs["ann", "bob"]
    # ann (1, 1, -1) against bob (1, -1, -1): p_o = 2/3, p_e = 4/9, kappa = (2/9) / (5/9).
    assert (ann_bob.steps, ann_bob.agreement, ann_bob.kappa) == approx((3, 2 / 3, 0.4))
    assert pairs["bob", "cat"].agreement == approx(1 / 2)
    # ann and cat both said 1 on both shared steps: perfect agreement, kappa undefined.
    assert pairs["ann", "cat"].agreement == 1.0
    assert np.isnan(pairs["ann", "cat"].kappa)


def test_agreement_with_the_adjudicated_labels() -> None:
    rows = agreement_with_reference(RATINGS, [1, 1, -1, 0], ["ann", "bob", "cat"], labels=TERNARY)
    assert [row.annotator for row in rows] == ["ann", "bob", "cat"]
    assert (rows[0].agreement, rows[0].kappa) == (1.0, 1.0)
    assert (rows[1].steps, rows[1].agreement) == (3, approx(2 / 3))
    assert rows[2].steps == 2


def test_krippendorff_alpha_hand_worked() -> None:
    # Nominal: coincidences o = [[2, 1], [1, 2]], n = 6, alpha = 1 - 5 * 2 / (3 * 3 * 2).
    nominal = np.array([[1, 1, -1], [1, -1, -1]])
    assert krippendorff_alpha(nominal) == approx(4 / 9)
    # Ordinal: marginals (1, 2, 3) give distances 1.5**2, 2.5**2 and 4**2 between -1, 0, 1;
    # alpha = 1 - 5 * (2 * 2.25 + 2 * 6.25) / (2 * (2 * 2.25 + 6 * 6.25 + 3 * 16)).
    ordinal = np.array([[-1, 0, 1], [0, 1, 1]])
    assert krippendorff_alpha(ordinal, level="ordinal") == approx(1 - 85 / 180)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval"])
def test_krippendorff_alpha_matches_the_package_with_missing_labels(level: AlphaLevel) -> None:
    rng = np.random.default_rng(7)
    truth = rng.choice(TERNARY, 120)
    ratings = np.array([noisy_copy(truth, 0.7, seed) for seed in range(4)], dtype=float)
    ratings[rng.random(ratings.shape) < 0.3] = nan
    expected = krippendorff.alpha(ratings, level_of_measurement=level)
    assert krippendorff_alpha(ratings, level=level) == approx(expected)


def test_krippendorff_ordinal_alpha_with_an_unused_schema_value_matches_the_package() -> None:
    rng = np.random.default_rng(8)
    truth = rng.choice([1, 2, 4, 5], 80)
    ratings = np.array([truth, np.where(rng.random(80) < 0.6, truth, 5)], dtype=float)
    scale = [1, 2, 3, 4, 5]
    expected = krippendorff.alpha(ratings, value_domain=scale, level_of_measurement="ordinal")
    assert krippendorff_alpha(ratings, level="ordinal", labels=scale) == approx(expected)


def test_krippendorff_alpha_is_undefined_without_pairable_disagreement() -> None:
    assert np.isnan(krippendorff_alpha(np.array([[1, 1], [1, 1]])))
    assert np.isnan(krippendorff_alpha(np.array([[1, nan], [nan, 1]])))
