"""Rubrics, their marks, and episode verdicts (issue #36). Imported by ``models.py`` so
Django finds them in the ``labeling`` app; kept apart from the step labels they sit beside.

- ``Rubric``: one version of a project's rubric (by name): its criteria
  (``labeling.rubrics``). Editing makes a new version; marks keep pointing to the version
  they were made on, and only the newest active version of each name is offered.
- ``RubricMark``: one annotator's mark on one criterion of one rubric version for one
  trajectory, with the steps that are its evidence.
- ``EpisodeVerdict``: one annotator's answer to the trajectory-level questions (outcome,
  failure mode, critique), for the whole episode (``agent`` empty) or for one of its agents.

Marks and verdicts keep their history like step labels (a pghistory event per change).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pghistory
from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

from labeling.rubrics import MARK_NAMES, OUTCOMES
from trajectories.models import Project, Trajectory


class Rubric(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rubrics")
    name = models.CharField(max_length=100, default="rubric")
    # [{"text": "...", "weight": 1.0, "condition": ""}, ...]; a criterion is its position.
    criteria = models.JSONField(default=list)
    version = models.PositiveIntegerField(default=1)
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "name", "version"], name="rubric_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class RubricMark(models.Model):
    class Mark(models.TextChoices):
        MET = "met", MARK_NAMES["met"]
        NOT_MET = "not_met", MARK_NAMES["not_met"]
        NOT_APPLICABLE = "na", MARK_NAMES["na"]

    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="rubric_marks"
    )
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rubric_marks"
    )
    rubric = models.ForeignKey(Rubric, on_delete=models.RESTRICT, related_name="marks")
    criterion = models.PositiveIntegerField()
    mark = models.CharField(max_length=10, choices=Mark.choices)
    # Step indexes of the trajectory, sorted.
    evidence = ArrayField(models.PositiveIntegerField(), default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "annotator", "rubric", "criterion"],
                name="rubricmark_unique_per_annotator",
            )
        ]
        indexes: ClassVar = [
            models.Index(fields=["rubric", "trajectory"], name="rubricmark_rubric_trajectory")
        ]

    def __str__(self) -> str:
        return f"{self.mark} on criterion {self.criterion} of {self.trajectory_id}"


RubricMarkEvent: Any = pghistory.create_event_model(
    RubricMark,
    pghistory.InsertEvent(),
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at"])),
    pghistory.DeleteEvent(),
    model_name="RubricMarkEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    abstract=False,
)


class EpisodeVerdict(models.Model):
    class Outcome(models.TextChoices):
        SUCCESS = OUTCOMES[0]
        PARTIAL = OUTCOMES[1]
        FAILURE = OUTCOMES[2]
        UNSURE = OUTCOMES[3]

    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="episode_verdicts"
    )
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="episode_verdicts"
    )
    # Empty: the whole episode; else one of the trajectory's agents (trajectories.agents).
    agent = models.CharField(max_length=200, blank=True, default="")
    outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True, default="")
    # A tag of the failure-mode taxonomy (the active schemas' error tags), or empty.
    failure_mode = models.CharField(max_length=200, blank=True, default="")
    critique = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "annotator", "agent"],
                name="episodeverdict_unique_per_annotator",
            )
        ]

    def __str__(self) -> str:
        return f"{self.outcome or 'no outcome'} on {self.trajectory_id} ({self.agent or 'episode'})"


EpisodeVerdictEvent: Any = pghistory.create_event_model(
    EpisodeVerdict,
    pghistory.InsertEvent(),
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at"])),
    pghistory.DeleteEvent(),
    model_name="EpisodeVerdictEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    abstract=False,
)
