"""Geometry for the small line charts of the compare pages, drawn as SVG by a template
(no Django, no plotting library).

A chart maps data coordinates to pixels once, here; ``templates/evaluation/_chart.html``
only draws what it is given: axes with ticks, one path per series, and a circle per point
wrapped in a link to the steps behind it.
"""

# Django-free: chart geometry from plain data.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH = 420
HEIGHT = 260
MARGIN_LEFT = 46
MARGIN_RIGHT = 12
MARGIN_TOP = 12
MARGIN_BOTTOM = 40


@dataclass(frozen=True)
class Datum:
    """One point as given: data coordinates, a tooltip and where it links to."""

    x: float
    y: float
    title: str
    href: str = ""


@dataclass(frozen=True)
class Point:
    px: float
    py: float
    title: str
    href: str


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # a class name: the stylesheet gives each series its colour
    points: list[Point]
    path: str  # SVG path data through the points; gaps where a value is missing


@dataclass(frozen=True)
class Tick:
    label: str
    position: float  # pixels along the axis


@dataclass(frozen=True)
class Chart:
    title: str
    width: int
    height: int
    left: float
    top: float
    right: float
    bottom: float
    x_label: str
    y_label: str
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    series: list[Series]
    diagonal: str  # path data of the y = x line, or ""
    marker: str  # path data of a vertical marker line, or ""

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)

    @property
    def plot_width(self) -> float:
        return self.right - self.left

    @property
    def plot_height(self) -> float:
        return self.bottom - self.top

    @property
    def center_x(self) -> float:
        return (self.left + self.right) / 2

    @property
    def center_y(self) -> float:
        return (self.top + self.bottom) / 2


def _format(value: float) -> str:
    return f"{value:g}" if abs(value) >= 1e-9 else "0"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) covering
    ``low..high``."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def line_chart(
    title: str,
    series: Sequence[tuple[str, str, Sequence[Datum]]],
    *,
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]] | None = None,
    diagonal: bool = False,
    marker: float | None = None,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> Chart:
    """A chart of ``(name, css class, data)`` series over fixed ranges. Points whose
    ``y`` is NaN are left out and break the line. ``x_ticks`` names the x ticks (e.g.
    bucket names); by default they are round numbers. ``diagonal`` draws y = x (a
    calibration curve's ideal); ``marker`` a vertical line at that x (the threshold)."""
    left, top = MARGIN_LEFT, MARGIN_TOP
    right, bottom = width - MARGIN_RIGHT, height - MARGIN_BOTTOM
    x0, x1 = x_range
    y0, y1 = y_range
    x_span = (x1 - x0) or 1.0
    y_span = (y1 - y0) or 1.0

    def px(x: float) -> float:
        return round(left + (x - x0) / x_span * (right - left), 1)

    def py(y: float) -> float:
        return round(bottom - (y - y0) / y_span * (bottom - top), 1)

    drawn = []
    for name, css, data in series:
        points: list[Point] = []
        segments: list[str] = []
        pen_down = False
        for datum in data:
            if not (math.isfinite(datum.x) and math.isfinite(datum.y)):
                pen_down = False
                continue
            point = Point(px(datum.x), py(datum.y), datum.title, datum.href)
            points.append(point)
            segments.append(f"{'L' if pen_down else 'M'}{point.px},{point.py}")
            pen_down = True
        drawn.append(Series(name, css, points, " ".join(segments)))

    if x_ticks is None:
        x_ticks = [(t, _format(t)) for t in nice_ticks(x0, x1)]
    return Chart(
        title=title,
        width=width,
        height=height,
        left=left,
        top=top,
        right=right,
        bottom=bottom,
        x_label=x_label,
        y_label=y_label,
        x_ticks=[Tick(label, px(value)) for value, label in x_ticks if x0 <= value <= x1],
        y_ticks=[Tick(_format(t), py(t)) for t in nice_ticks(y0, y1)],
        series=drawn,
        diagonal=f"M{px(max(x0, y0))},{py(max(x0, y0))} L{px(min(x1, y1))},{py(min(x1, y1))}"
        if diagonal
        else "",
        marker=f"M{px(marker)},{top} L{px(marker)},{bottom}"
        if marker is not None and x0 <= marker <= x1
        else "",
    )
