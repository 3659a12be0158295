"""Saved selections of a project's trajectories, and export jobs.

Both tables were created by trajectories (migration 0003) and keep their names."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings as django_settings
from django.db import models

from stepscope.jobs.models import ProgressJob
from trajectories.models import Project


class Selection(models.Model):
    """A saved, named filter over a project's trajectories (the trajectory list's filters).
    Exports freeze its definition into their manifest."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="selections")
    name = models.SlugField(max_length=100)
    definition = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The table kept its name when the model moved here from trajectories.
        db_table = "trajectories_selection"
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "name"], name="selection_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class ExportJob(ProgressJob):
    """An export: its progress counts the trajectories read so far (``done``) of those
    the selection chose (``total``)."""

    KIND = "export"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="export_jobs")
    format = models.CharField(max_length=30)
    container = models.CharField(max_length=10, blank=True)  # jsonl, json or parquet
    compress = models.BooleanField(default=False)
    label_source = models.CharField(max_length=200)
    neutral = models.CharField(max_length=10)
    options = models.JSONField(default=dict, blank=True)
    # The selection's definition as it was when the export started.
    selection_name = models.CharField(max_length=100, blank=True)
    selection = models.JSONField(default=dict, blank=True)
    split = models.CharField(max_length=200, blank=True)
    seed = models.IntegerField(default=0)
    out_dir = models.CharField(max_length=500, blank=True)
    files = models.JSONField(default=list, blank=True)  # [{"name", "sha256", "rows", "bytes"}]
    manifest = models.JSONField(null=True, blank=True)
    row_count = models.PositiveBigIntegerField(default=0)

    class Meta:
        db_table = "trajectories_exportjob"
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.format} export {self.pk}"


__all__ = ["ExportJob", "Selection"]
