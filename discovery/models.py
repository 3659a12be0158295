"""The encoders whose vectors are stored. The vectors themselves live in tables that exist
only where the database has pgvector (``discovery/store.py``)."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from discovery.question_models import (  # noqa: F401  (Django finds the models here)
    Question,
    QuestionAnswer,
)
from stepscope.jobs.models import ProgressJob


class EmbeddingModel(models.Model):
    """An encoder by name and revision: vectors of two rows are never compared, so a
    change of encoder (or of its weights) starts a new set and leaves the old one."""

    name = models.CharField(max_length=300)
    revision = models.CharField(max_length=100, blank=True)
    dim = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "revision"], name="embedding_model_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.revision}" if self.revision else self.name


class VectorField(models.Field):
    """pgvector's ``vector`` (any width), read and written as its text (``[0.1,0.2]``).
    Queries go through ``discovery/store.py``'s SQL; the field exists so Django knows
    the tables (a test database's flush truncates them with the steps)."""

    def db_type(self, connection: object) -> str:
        return "vector"


class StepVector(models.Model):
    """One step's vector from one encoder. The table exists only where the database has
    pgvector (``store.vector_tables_ensure``); its foreign keys cascade in the database,
    so Django's deletion never reads it."""

    pk = models.CompositePrimaryKey("model", "step")
    model = models.ForeignKey(EmbeddingModel, on_delete=models.DO_NOTHING, db_constraint=False)
    step = models.ForeignKey(
        "trajectories.Step", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    trajectory = models.ForeignKey(
        "trajectories.Trajectory",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    embedding = VectorField()

    class Meta:
        db_table = "discovery_step_vector"

    def __str__(self) -> str:
        return f"step {self.step_id} ({self.model_id})"


class TaskVector(models.Model):
    """One trajectory's task text vector from one encoder (as ``StepVector``)."""

    pk = models.CompositePrimaryKey("model", "trajectory")
    model = models.ForeignKey(EmbeddingModel, on_delete=models.DO_NOTHING, db_constraint=False)
    trajectory = models.ForeignKey(
        "trajectories.Trajectory",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    embedding = VectorField()

    class Meta:
        db_table = "discovery_task_vector"

    def __str__(self) -> str:
        return f"task of trajectory {self.trajectory_id} ({self.model_id})"


class FailureModeRun(ProgressJob):
    """A clustering of a selection's first-error steps (``discovery/modes.py``): the
    selection (default: the failed trajectories), whose first errors (a label source, a
    scorer at a threshold), and the judge that describes each mode, if any. ``total``
    counts the first errors found, ``done`` those clustered."""

    KIND = "failure modes"

    project = models.ForeignKey(
        "trajectories.Project", on_delete=models.CASCADE, related_name="failure_mode_runs"
    )
    label_source = models.CharField(max_length=200)
    threshold = models.FloatField(default=0.5)
    selection = models.JSONField(default=dict, blank=True)
    judge = models.ForeignKey(
        "scoring.Scorer", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    chosen = models.PositiveIntegerField(default=0)  # trajectories the selection chose
    k = models.PositiveIntegerField(default=0)
    silhouette = models.FloatField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"failure modes {self.pk}"


class FailureMode(models.Model):
    """One cluster of a run: its number and name (kept from the run before where its
    members mostly stay), distinctive words, a judge's one-line description, size, its
    share of the run's first errors and example steps (nearest its centre)."""

    run = models.ForeignKey(FailureModeRun, on_delete=models.CASCADE, related_name="modes")
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=300)
    words = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True)
    size = models.PositiveIntegerField()
    share = models.FloatField()
    examples = models.JSONField(default=list, blank=True)  # step ids
    kept = models.BooleanField(default=False)  # number and name from the run before

    class Meta:
        ordering: ClassVar = ["run", "-size", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["run", "number"], name="failure_mode_unique_number")
        ]

    def __str__(self) -> str:
        return f"mode {self.number}: {self.name}"


class FailureModeMember(models.Model):
    """A trajectory of a mode, by its first-error step."""

    mode = models.ForeignKey(FailureMode, on_delete=models.CASCADE, related_name="members")
    trajectory = models.ForeignKey(
        "trajectories.Trajectory", on_delete=models.CASCADE, related_name="+"
    )
    step = models.ForeignKey("trajectories.Step", on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["mode", "trajectory"], name="failure_mode_member_unique"
            )
        ]
        indexes: ClassVar = [models.Index(fields=["trajectory"])]

    def __str__(self) -> str:
        return f"trajectory {self.trajectory_id} in mode {self.mode_id}"


class NoteRun(ProgressJob):
    """A grouping of the annotators' free notes (the critiques of episode verdicts) by
    meaning, with the clustering of failure modes (``discovery/modes.py``): open coding
    turned into candidate error tags. ``total`` counts the notes read, ``done`` those
    grouped."""

    KIND = "note groups"

    project = models.ForeignKey(
        "trajectories.Project", on_delete=models.CASCADE, related_name="note_runs"
    )
    k = models.PositiveIntegerField(default=0)
    silhouette = models.FloatField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"note groups {self.pk}"


class NoteGroup(models.Model):
    """One group of a note run: number and name (kept from the run before where its notes
    mostly stay), distinctive words, size, share of the run's notes, its notes and the
    ones nearest its centre (episode verdict ids: a verdict deleted since is skipped), and
    the error tag an admin made of it."""

    run = models.ForeignKey(NoteRun, on_delete=models.CASCADE, related_name="groups")
    number = models.PositiveIntegerField()
    name = models.CharField(max_length=300)
    words = models.JSONField(default=list, blank=True)
    size = models.PositiveIntegerField()
    share = models.FloatField()
    members = models.JSONField(default=list, blank=True)
    examples = models.JSONField(default=list, blank=True)
    kept = models.BooleanField(default=False)
    tag = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering: ClassVar = ["run", "-size", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["run", "number"], name="note_group_unique_number")
        ]

    def __str__(self) -> str:
        return f"note group {self.number}: {self.name}"
