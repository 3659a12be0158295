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
    # The named batch the export becomes a new version of, when it finishes.
    batch = models.ForeignKey(
        "ExportBatch", null=True, blank=True, on_delete=models.SET_NULL, related_name="exports"
    )

    class Meta:
        db_table = "trajectories_exportjob"
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.format} export {self.pk}"


class ExportBatch(models.Model):
    """A named, versioned batch of a project: each export into it that finishes is its
    next version, so a training job can pin ``rl-batch@7``."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="export_batches")
    name = models.SlugField(max_length=100)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "name"], name="exportbatch_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class BatchVersion(models.Model):
    """Version ``number`` of a batch: the finished export that made it (its files and
    manifest) and, in its rows, what the diff between two versions compares."""

    batch = models.ForeignKey(ExportBatch, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    export = models.OneToOneField(ExportJob, on_delete=models.CASCADE, related_name="batch_version")
    trajectories = models.PositiveIntegerField(default=0)
    labels = models.PositiveIntegerField(default=0)  # labelled steps
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["batch", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["batch", "number"], name="batchversion_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.batch.name}@{self.number}"


class BatchVersionRow(models.Model):
    """One trajectory of a version, as the export read it: enough to diff two versions
    without reading their files. ``trajectory_id`` is no foreign key, so a version keeps
    its record of a trajectory deleted since."""

    version = models.ForeignKey(BatchVersion, on_delete=models.CASCADE, related_name="rows")
    trajectory_id = models.BigIntegerField()
    external_id = models.CharField(max_length=500)
    # A digest of the trajectory's content hash, steps (its last prefix hash), step
    # count and outcome: a live trace that grew, or a changed outcome, is "changed".
    content_digest = models.CharField(max_length=32)
    label_digest = models.CharField(max_length=32)
    # {"step index": value}: the label source's value of each labelled, labelable step.
    labels = models.JSONField(default=dict)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["version", "trajectory_id"], name="batchversionrow_unique_trajectory"
            )
        ]

    def __str__(self) -> str:
        return f"{self.external_id} in version {self.version_id}"


__all__ = ["BatchVersion", "BatchVersionRow", "ExportBatch", "ExportJob", "Selection"]
