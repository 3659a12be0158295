"""Label schemas and step labels. Imported labels (ProcessBench, PRM800K, ...) are step
labels by a non-login annotator named after their source, e.g. ``import:processbench``."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models

from trajectories.models import Project, Step

TERNARY_VALUES = [
    {"value": -1, "name": "bad", "color": "#d64545", "key": "1"},
    {"value": 0, "name": "neutral", "color": "#9a9a9a", "key": "2"},
    {"value": 1, "name": "good", "color": "#2f9e44", "key": "3"},
]


class LabelSchema(models.Model):
    class Kind(models.TextChoices):
        TERNARY = "ternary"
        BINARY = "binary"
        ORDINAL = "ordinal"
        CATEGORICAL = "categorical"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="label_schemas")
    name = models.CharField(max_length=100, default="step quality")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.TERNARY)
    # [{"value": -1, "name": "bad", "color": "#d64545", "key": "1"}, ...]
    values = models.JSONField(default=list)
    error_tags = models.JSONField(default=list, blank=True)
    ask_rationale = models.BooleanField(default=False)
    first_error_mode = models.BooleanField(default=False)
    version = models.PositiveIntegerField(default=1)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "name", "version"], name="labelschema_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class StepLabel(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft"
        SUBMITTED = "submitted"

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="labels")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="step_labels"
    )
    schema = models.ForeignKey(LabelSchema, on_delete=models.PROTECT, related_name="labels")
    value = models.IntegerField()
    tags = models.JSONField(default=list, blank=True)
    rationale = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.SUBMITTED)
    saw_model_scores = models.BooleanField(default=False)
    time_spent_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["step", "annotator", "schema"], name="steplabel_unique_per_annotator"
            )
        ]
        indexes: ClassVar = [models.Index(fields=["step", "schema"], name="steplabel_step_schema")]

    def __str__(self) -> str:
        return f"{self.value} on {self.step_id} by {self.annotator_id}"
