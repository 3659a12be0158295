"""Rubric agreement per criterion on hand-worked cases: agreement, Cohen's kappa over
the three marks, the confusion, and the evidence steps' Jaccard overlap."""

from __future__ import annotations

import pytest

from metrics.rubrics import RubricMarks, criterion_alignment, jaccard, rubric_alignment


def test_jaccard_of_evidence_steps() -> None:
    assert jaccard([1, 2], [2, 3]) == pytest.approx(1 / 3)
    assert jaccard([0], [0]) == 1.0
    assert jaccard([], [4]) == 0.0
    assert jaccard([], []) is None


def test_one_criterion_by_hand() -> None:
    got = criterion_alignment(
        0,
        [
            (("met", [1, 2]), ("met", [2, 3])),
            (("met", []), ("not_met", [])),
            (("not_met", [0]), ("not_met", [0])),
            (("na", []), ("na", [4])),
        ],
    )
    assert got.pairs == 4 and got.agreement == 0.75
    # Observed 3/4; chance (2*1 + 1*2 + 1*1) / 16 = 5/16; kappa (12/16 - 5/16) / (11/16).
    assert got.kappa == pytest.approx(7 / 11)
    assert got.confusion == ((1, 1, 0), (0, 1, 0), (0, 0, 1))
    # Pairs with a cited step: 1/3, 1 and 0 (the pair citing nothing is left out).
    assert got.evidence_pairs == 3 and got.evidence_jaccard == pytest.approx(4 / 9)


def test_kappa_is_none_where_both_always_give_one_mark_and_nothing_paired_is_empty() -> None:
    same = criterion_alignment(1, [(("met", []), ("met", []))] * 3)
    assert same.agreement == 1.0 and same.kappa is None and same.evidence_jaccard is None
    empty = criterion_alignment(2, [])
    assert (empty.pairs, empty.agreement, empty.kappa) == (0, None, None)
    with pytest.raises(ValueError, match="criterion 3: marks are met, not_met, na"):
        criterion_alignment(3, [(("yes", []), ("met", []))])


def test_a_rubric_pairs_only_trajectories_both_marked_on_each_criterion() -> None:
    a: RubricMarks = {
        10: {0: ("met", [1]), 1: ("na", [])},
        11: {0: ("not_met", [])},
        12: {1: ("met", [])},
    }
    b: RubricMarks = {
        10: {0: ("met", [1]), 1: ("met", [])},
        11: {1: ("met", [2])},
        13: {0: ("met", [])},
    }
    first, second = rubric_alignment(a, b, 2)
    assert (first.pairs, first.agreement, first.evidence_jaccard) == (1, 1.0, 1.0)
    assert (second.pairs, second.agreement) == (1, 0.0)
    assert second.as_json()["confusion"]["counts"][2] == [1, 0, 0]
