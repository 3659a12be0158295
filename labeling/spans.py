"""Span labels: a value given to a run of consecutive steps (TRIAGE's segment roles:
decisive progress, useful exploration, no-progress infrastructure, regression; or "loop",
"recovered from an error"), under a span schema of the project.

A span schema is its own model rather than a kind of :class:`~labeling.models.LabelSchema`:
a step schema's values are integers voted on per step (majority, label sources, exports
of one value a step), while a span's value names a segment, spans of one annotator may
nest or overlap, and nothing takes a majority of them. Keeping them apart leaves every
reader of step schemas as it was.

The models live here and are re-exported by ``labeling.models`` (Django finds them
there). Every change to a span label is kept as history, as step labels are.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pghistory
import pgtrigger
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from labeling.models import RESERVED_KEYS, reserved_key_error
from trajectories.models import Project, Trajectory

# The TRIAGE segment roles, the values a new span schema starts with when none are given.
TRIAGE_VALUES: list[dict[str, str]] = [
    {"value": "decisive progress", "key": "1", "color": "#2f9e44"},
    {"value": "useful exploration", "key": "2", "color": "#1c7ed6"},
    {"value": "no-progress infrastructure", "key": "3", "color": "#9a9a9a"},
    {"value": "regression", "key": "4", "color": "#d64545"},
]
MAX_SPAN_VALUE_CHARS = 100
_HEX_COLOR = re.compile(r"#[0-9a-fA-F]{3,8}")
_FALLBACK_COLOR = "#6b7280"


def span_values_error(values: Any) -> str | None:
    """What is wrong with a span schema's ``values``, or None: a non-empty list of
    ``{"value": text, "key": one character, "color": "#hex"}``, values and keys unique
    (in either case), no key one the labeling page binds for itself."""
    if not isinstance(values, list) or not values:
        return "values is a non-empty list of {value, key, color}"
    seen_values: set[str] = set()
    seen_keys: set[str] = set()
    for position, entry in enumerate(values):
        where = f"values.{position}"
        if not isinstance(entry, dict):
            return f"{where} is an object with value, key and color"
        unknown = sorted(set(entry) - {"value", "key", "color"})
        if unknown:
            return f"{where}: unknown field {', '.join(unknown)} (fields: value, key, color)"
        value = entry.get("value")
        if not isinstance(value, str) or not value.strip():
            return f"{where}.value is a non-empty text"
        if len(value) > MAX_SPAN_VALUE_CHARS:
            return f"{where}.value is longer than {MAX_SPAN_VALUE_CHARS} characters"
        if value in seen_values:
            return f"{where}.value {value!r} is given twice"
        seen_values.add(value)
        key = entry.get("key", "")
        if not isinstance(key, str) or len(key) > 1:
            return f"{where}.key is one character"
        if key:
            problem = reserved_key_error(key)
            if problem is not None:
                return f"{where} ({value}): {problem}"
            if key.lower() in seen_keys:
                return f"{where} ({value}): key {key!r} is given twice"
            seen_keys.add(key.lower())
        color = entry.get("color", "")
        if color and (not isinstance(color, str) or not _HEX_COLOR.fullmatch(color)):
            return f"{where}.color is a #hex colour"
    return None


class SpanSchema(models.Model):
    """A project's question about runs of steps: which segment role (or pattern) a run of
    consecutive steps plays. Identified by project and name; its keys are pressed while
    a run of steps is selected (shift+j / shift+k), so they may repeat a step schema's."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="span_schemas")
    name = models.CharField(max_length=100, default="segment role")
    # [{"value": "regression", "key": "4", "color": "#d64545"}, ...]
    values = models.JSONField(default=list)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "name"], name="spanschema_unique_name")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def entries(self) -> list[dict[str, str]]:
        """The values with a safe colour, in schema order."""
        entries = []
        for entry in self.values or []:
            if not isinstance(entry, dict) or not isinstance(entry.get("value"), str):
                continue
            color = str(entry.get("color", ""))
            entries.append(
                {
                    "value": entry["value"],
                    "key": str(entry.get("key") or ""),
                    "color": color if _HEX_COLOR.fullmatch(color) else _FALLBACK_COLOR,
                }
            )
        return entries

    def entry_for(self, value: str) -> dict[str, str] | None:
        return next((e for e in self.entries if e["value"] == value), None)

    def clean(self) -> None:
        # The admin's form calls this; the span schema page and services check the same.
        problem = span_values_error(self.values)
        if problem is not None:
            raise ValidationError({"values": problem})


class SpanLabel(models.Model):
    """One annotator's value on the steps ``start_index`` to ``end_index`` (both
    included) of a trajectory, under one span schema. An annotator's spans may nest or
    overlap (a loop inside a run of exploration); the same range under the same schema
    is one span, whose value a second label replaces."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="spans")
    schema = models.ForeignKey(SpanSchema, on_delete=models.RESTRICT, related_name="labels")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="span_labels"
    )
    start_index = models.PositiveIntegerField()
    end_index = models.PositiveIntegerField()
    value = models.CharField(max_length=MAX_SPAN_VALUE_CHARS)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "schema", "annotator", "start_index", "end_index"],
                name="spanlabel_unique_range",
            ),
            models.CheckConstraint(
                condition=models.Q(start_index__lte=models.F("end_index")),
                name="spanlabel_start_before_end",
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["trajectory", "start_index"], name="spanlabel_trajectory"),
            models.Index(fields=["schema", "annotator"], name="spanlabel_schema_annotator"),
        ]

    def __str__(self) -> str:
        return f"{self.value} on {self.start_index}-{self.end_index} by {self.annotator_id}"


SpanLabelEvent: Any = pghistory.create_event_model(
    SpanLabel,
    pghistory.InsertEvent(),
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at"])),
    pghistory.DeleteEvent(),
    model_name="SpanLabelEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    level=pgtrigger.Statement,
    meta={"indexes": [models.Index(fields=["trajectory"], name="spanlabelevent_trajectory")]},
    abstract=False,
)


class FinalSpan(models.Model):
    """An adjudicated span: after comparing the annotators' spans of a trajectory, a
    reviewer picks one of them or sets a range and value of their own. Its own label
    source (``human:adjudicated``, as a step's final label is), never mixed with the
    annotators'. One per trajectory, schema and range; every change is kept."""

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="final_spans")
    schema = models.ForeignKey(SpanSchema, on_delete=models.RESTRICT, related_name="final_spans")
    start_index = models.PositiveIntegerField()
    end_index = models.PositiveIntegerField()
    value = models.CharField(max_length=MAX_SPAN_VALUE_CHARS)
    adjudicator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="final_spans"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "schema", "start_index", "end_index"],
                name="finalspan_unique_range",
            ),
            models.CheckConstraint(
                condition=models.Q(start_index__lte=models.F("end_index")),
                name="finalspan_start_before_end",
            ),
        ]
        indexes: ClassVar = [
            models.Index(fields=["trajectory", "start_index"], name="finalspan_trajectory"),
        ]

    def __str__(self) -> str:
        return f"final {self.value} on {self.start_index}-{self.end_index}"


FinalSpanEvent: Any = pghistory.create_event_model(
    FinalSpan,
    pghistory.InsertEvent(),
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at"])),
    pghistory.DeleteEvent(),
    model_name="FinalSpanEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    abstract=False,
)

__all__ = [
    "RESERVED_KEYS",
    "TRIAGE_VALUES",
    "FinalSpan",
    "FinalSpanEvent",
    "SpanLabel",
    "SpanLabelEvent",
    "SpanSchema",
    "span_values_error",
]
