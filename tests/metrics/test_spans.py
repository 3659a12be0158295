"""Agreement between annotators' span labels by overlap (metrics/spans.py)."""

from __future__ import annotations

import pytest

from metrics.spans import (
    Span,
    per_step_values,
    span_agreement,
    step_agreement,
    value_iou,
)


def test_same_spans_agree_fully() -> None:
    a = [Span(1, 2, 5, "loop")]
    assert value_iou(a, list(a), "loop") == 1.0
    assert step_agreement(a, list(a)) == 1.0


def test_iou_counts_shared_steps_over_the_union() -> None:
    # A covers 2..5 (4 steps), B covers 4..7 (4 steps): 2 shared of 6.
    a = [Span(1, 2, 5, "loop")]
    b = [Span(1, 4, 7, "loop")]
    assert value_iou(a, b, "loop") == pytest.approx(2 / 6)


def test_iou_is_per_trajectory_and_per_value() -> None:
    # The same indices of another trajectory, or another value, are not an overlap.
    a = [Span(1, 0, 3, "loop"), Span(2, 0, 1, "regression")]
    b = [Span(2, 0, 3, "loop"), Span(1, 0, 1, "regression")]
    assert value_iou(a, b, "loop") == 0.0
    assert value_iou(a, b, "regression") == 0.0


def test_a_value_nobody_used_has_no_iou() -> None:
    a = [Span(1, 0, 3, "loop")]
    assert value_iou(a, a, "regression") is None
    assert step_agreement([], []) is None


def test_overlapping_spans_of_one_annotator_count_each_step_once() -> None:
    a = [Span(1, 0, 4, "loop"), Span(1, 2, 3, "loop")]
    b = [Span(1, 0, 4, "loop")]
    assert value_iou(a, b, "loop") == 1.0


def test_step_agreement_compares_the_sets_of_values_per_step() -> None:
    # Steps 0..3 covered. A: loop on 0..3, regression on 3. B: loop on 0..3.
    # Steps 0, 1, 2 agree ({loop}); step 3 does not ({loop, regression} vs {loop}).
    a = [Span(1, 0, 3, "loop"), Span(1, 3, 3, "regression")]
    b = [Span(1, 0, 3, "loop")]
    assert step_agreement(a, b) == pytest.approx(3 / 4)


def test_per_step_values_lists_each_steps_values() -> None:
    spans = [Span(1, 1, 2, "loop"), Span(1, 2, 3, "regression"), Span(1, 9, 12, "loop")]
    assert per_step_values(spans, 5) == [[], ["loop"], ["loop", "regression"], ["regression"], []]


def test_span_agreement_is_the_mean_over_pairs() -> None:
    by = {
        "ann": [Span(1, 0, 3, "loop")],
        "bob": [Span(1, 0, 3, "loop")],
        "cid": [Span(1, 2, 3, "loop")],
    }
    result = span_agreement(by, values=["regression", "loop"])
    assert result.annotators == ["ann", "bob", "cid"]
    assert result.pairs == 3
    # ann-bob 1.0, ann-cid 0.5, bob-cid 0.5.
    assert result.iou["loop"] == pytest.approx(2 / 3)
    # Nobody used it: reported (the schema lists it), without a figure.
    assert result.iou["regression"] is None
    assert list(result.iou) == ["regression", "loop"]
    assert result.step_agreement == pytest.approx(2 / 3)
    assert result.as_json()["pairs"] == 3


def test_one_annotator_has_no_pairs() -> None:
    result = span_agreement({"ann": [Span(1, 0, 3, "loop")]})
    assert result.pairs == 0
    assert result.iou == {"loop": None}
    assert result.step_agreement is None
