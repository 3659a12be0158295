"""The compare pages' chart geometry and numbers modules, without a database: data to
pixels, gaps, ticks; and both stay free of Django."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation import compare_metrics as cm
from evaluation.charts import Datum, line_chart, nice_ticks
from tests.test_layering import django_modules_loaded_by


@pytest.mark.parametrize("module", ["evaluation.charts", "evaluation.compare_metrics"])
def test_module_does_not_import_django(module: str) -> None:
    assert django_modules_loaded_by(f"import {module}") == []


def test_nice_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0.5, 0.5) == [0.5]


def test_points_map_to_pixels_and_missing_values_break_the_line() -> None:
    chart = line_chart(
        "t",
        [("s", "series-1", [Datum(0, 0, "a", "/a"), Datum(0.5, math.nan, "b"), Datum(1, 1, "c")])],
        x_range=(0, 1),
        y_range=(0, 1),
        x_label="x",
        y_label="y",
        diagonal=True,
        marker=0.5,
        width=200,
        height=100,
    )
    (series,) = chart.series
    first, last = series.points
    # Bottom-left and top-right corners of the plot area.
    assert (first.px, first.py) == (chart.left, chart.bottom)
    assert (last.px, last.py) == (chart.right, chart.top)
    assert first.href == "/a"
    # The NaN point is dropped and the pen lifts: two separate moves, no line between.
    assert series.path.count("M") == 2 and "L" not in series.path
    assert chart.diagonal.startswith("M") and chart.marker.startswith("M")
    assert not chart.empty


def test_named_ticks_for_buckets() -> None:
    chart = line_chart(
        "t",
        [("s", "series-1", [Datum(2, 0.5, "x")])],
        x_range=(1.5, 2.5),
        y_range=(0, 1),
        x_label="x",
        y_label="y",
        x_ticks=[(2.0, "11-20")],
    )
    assert [tick.label for tick in chart.x_ticks] == ["11-20"]
    assert chart.x_ticks[0].position == chart.center_x


def test_bucket_names() -> None:
    assert cm.bucket_names((1, 6, 11, 21)) == ["1-5", "6-10", "11-20", "21+"]
    assert cm.bucket_names((0, 1, 2))[:2] == ["0", "1"]


def test_slice_rows_skip_values_not_shown_and_keep_order() -> None:
    scale = cm.Scale(values=(-1, 1), names=("bad", "good"), bad=-1, good=1, ordinal=False)
    rows = cm.StepRows(
        trajectory=np.array([1, 1, 2, 2, 3]),
        index=np.array([0, 1, 0, 1, 0]),
        label=np.array([1.0, -1.0, 1.0, 1.0, -1.0]),
        score=np.array([0.9, 0.2, 0.8, 0.7, 0.9]),
        group=np.array([0, 0, 1, 1, -1]),
    )
    found = cm.slice_rows(rows, scale, [("a", "A"), ("b", "B")], threshold=0.5)
    assert [(r.value, r.steps, r.trajectories) for r in found] == [("a", 2, 1), ("b", 2, 1)]
    # Trajectory 1 is found at step 1; trajectory 2 is correct and nothing is flagged.
    assert math.isnan(found[0].first_error_f1)  # no correct trajectory to be right on
    assert found[1].accuracy == 1.0


def test_outcome_process_from_rows() -> None:
    rows = cm.StepRows(
        trajectory=np.array([10, 10, 11, 12]),
        index=np.array([0, 1, 0, 0]),
        label=np.full(4, np.nan),
        score=np.array([0.9, 0.5, 0.2, 0.4]),
        group=np.zeros(4, dtype=np.int64),
    )
    outcomes = cm.TrajectoryOutcomes(
        trajectory=np.array([10, 11, 12]),
        outcome=np.array([1, 0, -1]),
        length_bucket=np.array([0, 0, 1]),
    )
    result = cm.outcome_process(rows, outcomes)
    assert (result.trajectories, result.successes, result.failures) == (3, 1, 1)
    assert result.auroc == {"min": 1.0, "mean": 1.0, "last": 1.0}
    by_position = {p.name: p for p in result.by_position}
    assert by_position["0"].steps == 3
    assert by_position["0"].mean_success == pytest.approx(0.9)
    assert by_position["1"].mean == pytest.approx(0.5)
    assert [p.steps for p in result.by_length] == [3, 1]
