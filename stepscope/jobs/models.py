"""Abstract bases of every job and chunk model. A concrete job keeps its own table,
project link and fields of its own; these hold what every kind shares, so the states,
progress display and chunk bookkeeping are written once."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


class Job(models.Model):
    """A background job: its state, who started it, when it started and ended, and why it
    failed (written by :func:`stepscope.jobs.lifecycle.job_fail`). ``KIND`` names the kind
    on the status page."""

    KIND: ClassVar[str] = ""
    Status = JobStatus
    ACTIVE: ClassVar = ACTIVE

    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE


class ProgressJob(Job):
    """A job that counts its work done out of a total. ``RATE_FIELD`` names the field
    that holds the final rate (units per second) once the job has ended, where the kind
    keeps one."""

    RATE_FIELD: ClassVar[str] = ""

    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0

    @property
    def rate(self) -> float | None:
        """Units per second: final once the job ends, so far while it runs."""
        if not self.is_active:
            final: float | None = getattr(self, self.RATE_FIELD) if self.RATE_FIELD else None
            return final
        if not self.started_at or not self.done:
            return None
        elapsed = (timezone.now() - self.started_at).total_seconds()
        return self.done / elapsed if elapsed > 0 else None

    @property
    def eta_seconds(self) -> int | None:
        rate = self.rate
        if not self.is_active or not rate:
            return None
        return int(max(0, self.total - self.done) / rate)


class ChunkedJob(ProgressJob):
    """A job whose work Celery tasks do a chunk at a time."""

    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class ChunkStatus(models.TextChoices):
    PENDING = "pending"
    DONE = "done"


class Chunk(models.Model):
    """The work one Celery task does. Its status changes in the same transaction as what
    it writes, so a redelivered chunk never counts twice. The concrete chunk adds the
    link to its job and what the work is."""

    Status = ChunkStatus

    number = models.PositiveIntegerField()
    status = models.CharField(
        max_length=10, choices=ChunkStatus.choices, default=ChunkStatus.PENDING
    )
    # Deliveries so far: a chunk whose worker keeps dying fails the job instead of
    # coming back for ever.
    attempts = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
