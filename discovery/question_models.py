"""Questions asked in plain language and their answers (``discovery/questions.py``)."""

from __future__ import annotations

from django.db import models

from stepscope.jobs.models import ProgressJob
from trajectories.models import Project, Step, Trajectory


class Question(ProgressJob):
    """A question, the judge asked, and the selection its candidates came from: the
    judge's proposal (``proposed``, with the names the selection language refused and
    why in ``refused``) unless the asker gave the filters (``given_filters``). ``total``
    counts the candidates read, at most ``limit``."""

    KIND = "question"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="questions")
    # Kept when the judge is deleted, so the answers keep saying who gave them.
    judge = models.ForeignKey(
        "scoring.Scorer", null=True, on_delete=models.SET_NULL, related_name="+"
    )
    judge_name = models.CharField(max_length=200)
    text = models.TextField()
    given_filters = models.BooleanField(default=False)
    # The selection read, as the list's query string has it (name -> text).
    filters = models.JSONField(default=dict)
    proposed = models.JSONField(default=dict)
    refused = models.JSONField(default=dict)
    criterion = models.TextField(blank=True)
    limit = models.PositiveIntegerField(default=30)
    matched = models.PositiveIntegerField(default=0)
    unreadable = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["project", "-created_at"], name="question_project_recent")]

    def __str__(self) -> str:
        return f"question {self.pk} ({self.status})"


class QuestionAnswer(models.Model):
    """The judge's word on one candidate: whether it matches, the step that shows it,
    and its reason; or why its reply could not be read (``problem``)."""

    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="answers")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="+")
    step = models.ForeignKey(Step, null=True, on_delete=models.CASCADE, related_name="+")
    matched = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    problem = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["question", "trajectory"], name="questionanswer_unique_trajectory"
            )
        ]

    def __str__(self) -> str:
        return f"answer to question {self.question_id} on trajectory {self.trajectory_id}"
