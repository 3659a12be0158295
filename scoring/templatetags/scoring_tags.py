"""Filters for showing step scores: look one up, colour it, format a duration."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def score_for(scores: dict[int, float] | None, step_id: Any) -> float | None:
    """``{{ scores|score_for:step.pk }}``: the step's score, or None."""
    if not scores:
        return None
    return scores.get(step_id)


@register.filter
def score_color(value: float | None) -> str:
    """Red (0) through amber to green (1); grey when there is no score."""
    if value is None:
        return "#d8dbe0"
    hue = round(120 * max(0.0, min(1.0, float(value))))
    return f"hsl({hue} 65% 45%)"


@register.filter
def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"
