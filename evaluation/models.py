"""What the evaluation pages keep: summaries of a whole project (compare, failures) that
take seconds to make on a large one, with what they were made from."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from trajectories.models import Project


class KeptSummary(models.Model):
    """One page's summary of a project for one set of parameters (``key``, a hash of the
    page's query). ``value`` is the page's result, pickled (made and read only by
    :mod:`evaluation.kept`); ``marks`` what it was made from (:mod:`rollouts.changes`), so
    a reader can tell whether it still holds; ``refreshing_since`` while a worker makes
    it again."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    page = models.CharField(max_length=20)
    key = models.CharField(max_length=64)
    params = models.JSONField(default=dict)
    value = models.BinaryField(null=True)
    marks = models.JSONField(null=True)
    made_at = models.DateTimeField(null=True)
    seconds = models.FloatField(null=True)
    refreshing_since = models.DateTimeField(null=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "page", "key"], name="keptsummary_unique")
        ]

    def __str__(self) -> str:
        return f"{self.page} of {self.project_id} ({self.key[:8]})"
