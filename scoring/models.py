"""Scorers, scoring runs (and head training runs), and the step scores they write."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scoring import prm
from trajectories.models import Project, Step


class Scorer(models.Model):
    """A process reward model as configured: kind, model reference and parameters.

    A scorer with no project is offered to every project; a project's own scorers (its
    trained heads, scores imported into it) belong to that project. Training a head
    again adds a new revision under the same name.
    """

    class Kind(models.TextChoices):
        TOKEN_CLASSIFICATION = prm.TOKEN_CLASSIFICATION
        STEP_TAG_LM = prm.STEP_TAG_LM
        SEQUENCE_CLASSIFIER = prm.SEQUENCE_CLASSIFIER
        TRAINED_HEAD = prm.TRAINED_HEAD
        EXTERNAL = prm.EXTERNAL

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="scorers"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=30, choices=Kind.choices)
    # A directory on the workers or a hub id; for a trained head, its encoder.
    model_ref = models.CharField(max_length=500, blank=True)
    # The hub revision of the model, or the number of a trained head's revision.
    revision = models.CharField(max_length=100, blank=True)
    # See scoring.prm.base.ScorerParams: separator, class index, max length, batch size...
    parameters = models.JSONField(default=dict, blank=True)
    trust_remote_code = models.BooleanField(default=False)
    queue = models.CharField(max_length=50, default="gpu")
    # A trained head's weights and its training metrics.
    artifact = models.JSONField(null=True, blank=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar = ["name", "-id"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "name", "revision"],
                condition=Q(project__isnull=False),
                name="scorer_unique_revision_in_project",
            ),
            models.UniqueConstraint(
                fields=["name", "revision"],
                condition=Q(project__isnull=True),
                name="scorer_unique_revision_global",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} r{self.revision}" if self.revision else self.name

    @property
    def runs_a_model(self) -> bool:
        return self.kind != self.Kind.EXTERNAL


class ScoringRun(models.Model):
    """One scoring pass over a selection of a project's steps (``score``), a head
    training (``train``) or a file of scores computed elsewhere (``import``)."""

    class Kind(models.TextChoices):
        SCORE = "score"
        TRAIN = "train"
        IMPORT = "import"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    ACTIVE: ClassVar = (Status.QUEUED, Status.RUNNING)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="scoring_runs")
    # A training run gets its scorer (the new revision) when it finishes.
    scorer = models.ForeignKey(
        Scorer, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.SCORE)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # {"only_unscored": bool, "trajectory_ids": [...], "filters": {...}}
    selection = models.JSONField(default=dict, blank=True)
    # Training: name, neutral handling, holdout, encoder and its parameters.
    parameters = models.JSONField(default=dict, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    chunks_total = models.PositiveIntegerField(default=0)
    chunks_done = models.PositiveIntegerField(default=0)
    truncated = models.PositiveIntegerField(default=0)
    steps_per_second = models.FloatField(null=True, blank=True)
    # Training: held-out AUROC, F1, ProcessBench first-error F1 and counts.
    metrics = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]
        indexes: ClassVar = [models.Index(fields=["project", "-id"], name="scoringrun_project_id")]

    def __str__(self) -> str:
        return f"{self.kind} run {self.pk} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0

    @property
    def rate(self) -> float | None:
        """Steps per second: final once the run ends, so far while it runs."""
        if not self.is_active:
            return self.steps_per_second
        if not self.started_at or not self.done:
            return None
        elapsed = (timezone.now() - self.started_at).total_seconds()
        return self.done / elapsed if elapsed > 0 else None

    @property
    def eta_seconds(self) -> int | None:
        rate = self.rate
        if not self.is_active or not rate:
            return None
        return int((self.total - self.done) / rate)


class ScoringChunk(models.Model):
    """The steps one Celery task scores. Its status changes in the same transaction as
    the scores it writes, so a redelivered chunk never counts twice."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"

    run = models.ForeignKey(ScoringRun, on_delete=models.CASCADE, related_name="chunks")
    number = models.PositiveIntegerField()
    trajectory_ids = models.JSONField(default=list)
    step_ids = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # Deliveries so far: a chunk whose worker keeps dying fails the run instead of
    # coming back for ever.
    attempts = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["run", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["run", "number"], name="scoringchunk_unique_number")
        ]

    def __str__(self) -> str:
        return f"chunk {self.number} of run {self.run_id}"


class StepScore(models.Model):
    """A scorer's probability that a step is correct. One per (step, scorer): reruns and
    redelivered chunks update it in place."""

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="scores")
    scorer = models.ForeignKey(Scorer, on_delete=models.CASCADE, related_name="scores")
    run = models.ForeignKey(
        ScoringRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="scores"
    )
    value = models.FloatField()
    # Context tokens seen, whether the prefix was cut from the left, raw logits.
    raw = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["step", "scorer"], name="stepscore_unique_per_scorer"),
            models.CheckConstraint(
                condition=Q(value__gte=0) & Q(value__lte=1), name="stepscore_value_0_1"
            ),
        ]
        indexes: ClassVar = [models.Index(fields=["scorer", "step"], name="stepscore_scorer_step")]

    def __str__(self) -> str:
        return f"{self.value:.3f} on {self.step_id} by {self.scorer_id}"
