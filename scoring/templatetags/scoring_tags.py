"""Filters for showing step scores and credit: look one up, colour it (scores red to
green, credit diverging around zero), format a duration."""

from __future__ import annotations

from typing import Any

from django import template

from scoring.selectors import StepEvidence, TrajectoryEvidence

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


@register.filter
def credit_color(value: float | None, scale: float | None = None) -> str:
    """Diverging colours with zero in the middle: red for credit lost, blue for credit
    earned, white at zero; ``scale`` is the magnitude that gets the full colour."""
    if value is None:
        return "#eef0f3"
    magnitude = abs(float(scale)) if scale else 1.0
    strength = min(1.0, abs(float(value)) / magnitude) if magnitude else 0.0
    hue = 0 if value < 0 else 215
    # Lightness runs from white (0 credit) to a saturated colour (full scale).
    return f"hsl({hue} 70% {round(97 - 39 * strength)}%)"


@register.filter
def signed(value: float | None, digits: int = 3) -> str:
    """``+0.125`` / ``-0.125``: credit with its sign."""
    if value is None:
        return ""
    return f"{float(value):+.{int(digits)}f}"


@register.filter
def saliency_scale(tokens: list[dict[str, Any]] | None) -> float:
    """The largest |attribution| of a saliency map's tokens (1 when all are zero)."""
    magnitudes = [abs(float(t.get("attribution", 0.0))) for t in tokens or []]
    return max(magnitudes, default=0.0) or 1.0


@register.filter
def evidence_for(evidence: TrajectoryEvidence | None, step_id: Any) -> StepEvidence | None:
    """``{{ evidence|evidence_for:step.pk }}``: what the page shows beside that step."""
    if evidence is None:
        return None
    return evidence.by_step.get(step_id)
