"""The encoders whose vectors are stored. The vectors themselves live in tables that exist
only where the database has pgvector (``discovery/store.py``)."""

from __future__ import annotations

from django.db import models

from discovery.question_models import (  # noqa: F401  (Django finds the models here)
    Question,
    QuestionAnswer,
)


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
