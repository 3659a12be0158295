"""Numbers on the compare pages: a metric that could not be computed (NaN, no data)
reads "n/a" instead of "nan"."""

from __future__ import annotations

import math
from typing import Any

from django import template

register = template.Library()


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@register.filter
def metric(value: Any, digits: int = 3) -> str:
    number = _number(value)
    return "n/a" if number is None else f"{number:.{int(digits)}f}"


@register.filter
def percent(value: Any) -> str:
    number = _number(value)
    return "n/a" if number is None else f"{number:.0%}"
