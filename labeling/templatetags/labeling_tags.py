"""Template filters of the labeling pages: a schema value's name and colour, durations."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone

from labeling.models import LabelSchema

register = template.Library()

_UNKNOWN = {"name": "?", "color": "#6b7280", "key": "", "value": None, "error": False}


@register.filter
def entry_for(schema: LabelSchema | None, value: int | None) -> dict[str, Any]:
    """The schema's entry (name, colour, key) for ``value``; colours are checked hex."""
    if schema is None or value is None:
        return _UNKNOWN
    return schema.entry_for(value) or {**_UNKNOWN, "name": str(value), "value": value}


@register.filter
def value_name(schema: LabelSchema | None, value: int | None) -> str:
    return str(entry_for(schema, value)["name"])


@register.filter
def minutes_left(moment: dt.datetime | None) -> int:
    if moment is None:
        return 0
    return max(0, int((moment - timezone.now()).total_seconds() // 60))


@register.filter
def percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0
