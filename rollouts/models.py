"""Policies, rollout jobs and what they produce: branches (a prefix continued k times),
first-error searches, chunks of work, the link from each continuation to its branch,
and Monte Carlo values per step."""

from __future__ import annotations

from typing import ClassVar

from django.db import models
from django.db.models import Q

from scoring.models import ModelReference
from stepscope.jobs.models import Chunk, ChunkedJob, Job
from trajectories.models import Project, Step, Trajectory


class Policy(ModelReference):
    """A generation model as configured: a causal LM (local directory or hub id) and its
    generation parameters (``rollouts.generation.PolicyParams``: prompt format,
    sampling, max new tokens, stop strings, batch size, device...). A policy with no
    project is offered to every project."""

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="policies"
    )
    # A policy always names its model (a scorer's may be blank: imported scores).
    model_ref = models.CharField(max_length=500)

    class Meta(ModelReference.Meta):
        verbose_name_plural = "policies"
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=Q(project__isnull=False),
                name="policy_unique_name_in_project",
            ),
            models.UniqueConstraint(
                fields=["name"], condition=Q(project__isnull=True), name="policy_unique_name_global"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class RolloutJob(ChunkedJob):
    """Continuations of a selection of steps with one policy.

    ``steps``: the given steps; ``all``: every labelable step of the selected
    trajectories; ``first-error-search``: a binary search per failed trajectory;
    ``critical``: each given step replaced by an alternative, then continued.
    """

    class Mode(models.TextChoices):
        STEPS = "steps"
        ALL = "all"
        SEARCH = "first-error-search"
        CRITICAL = "critical"

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        # Its continuation or token budget ran out before all the work was done.
        STOPPED = "stopped"
        FAILED = "failed"
        CANCELLED = "cancelled"

    KIND = "rollout"
    RATE_FIELD = "continuations_per_second"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="rollout_jobs")
    policy = models.ForeignKey(Policy, null=True, on_delete=models.SET_NULL, related_name="jobs")
    mode = models.CharField(max_length=20, choices=Mode.choices, default=Mode.STEPS)
    k = models.PositiveIntegerField()
    # See rollouts.answers: exact, boxed, numeric[:TOL], python:MOD:FUNC.
    answer_check = models.CharField(max_length=300, default="numeric")
    # {"step_ids": [...], "trajectory_ids": [...], "filters": {...}, "alternatives": {...}}
    selection = models.JSONField(default=dict, blank=True)
    # {"chunk_continuations": n}
    options = models.JSONField(default=dict, blank=True)
    max_continuations = models.PositiveIntegerField(null=True, blank=True)
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    # The job's own states: a budget can stop it.
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    # total and done count continuations planned and finished; more are planned as
    # searches go on.
    successes = models.PositiveIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)  # generated
    truncated = models.PositiveIntegerField(default=0)  # prompts cut to fit max_length
    continuations_per_second = models.FloatField(null=True, blank=True)
    tokens_per_second = models.FloatField(null=True, blank=True)
    # What was found: first errors per trajectory, critical steps, what the budget left.
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]
        indexes: ClassVar = [models.Index(fields=["project", "-id"], name="rolloutjob_project_id")]

    def __str__(self) -> str:
        return f"rollout job {self.pk} ({self.status})"


class RolloutSearch(models.Model):
    """One trajectory's first-error search: its state between probes and what it found."""

    class Status(models.TextChoices):
        SEARCHING = "searching"
        FOUND = "found"
        # The trajectory succeeded: there is no first error to look for.
        NO_ERROR = "no-error"
        # Nothing to search: no ground truth, or no labelable step.
        SKIPPED = "skipped"
        # The job's budget ran out first.
        STOPPED = "stopped"

    job = models.ForeignKey(RolloutJob, on_delete=models.CASCADE, related_name="searches")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="rollout_searches"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.SEARCHING)
    # rollouts.monte_carlo.FirstErrorSearch.to_dict()
    state = models.JSONField(default=dict)
    first_error_index = models.IntegerField(null=True, blank=True)
    rollouts = models.PositiveIntegerField(default=0)
    note = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["job", "trajectory"], name="rolloutsearch_unique")
        ]

    def __str__(self) -> str:
        return f"search on {self.trajectory_id} ({self.status})"


class RolloutBranch(models.Model):
    """A prefix continued ``k`` times: a trajectory's steps up to ``step_index``, or up
    to the step before it and then ``alternative`` in its place (a critical-step check)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"

    job = models.ForeignKey(RolloutJob, on_delete=models.CASCADE, related_name="branches")
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="rollout_branches"
    )
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="rollout_branches")
    step_index = models.PositiveIntegerField()
    replaced = models.BooleanField(default=False)
    # The replacement text; empty until the policy samples one, when none was given.
    alternative = models.TextField(blank=True)
    alternative_source = models.CharField(max_length=20, blank=True)
    search = models.ForeignKey(
        RolloutSearch, null=True, blank=True, on_delete=models.CASCADE, related_name="probes"
    )
    k = models.PositiveIntegerField()
    done = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    # Critical-step check: the trajectory's own outcome, and whether the alternative's
    # continuations mostly reached the other one.
    baseline_success = models.BooleanField(null=True, blank=True)
    critical = models.BooleanField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["job", "trajectory", "step_index", "replaced"],
                name="rolloutbranch_unique",
            )
        ]
        indexes: ClassVar = [models.Index(fields=["step", "-id"], name="rolloutbranch_step")]

    def __str__(self) -> str:
        return f"branch at step {self.step_index} of {self.trajectory_id}"

    @property
    def soft(self) -> float | None:
        return self.successes / self.done if self.done else None


class RolloutChunk(Chunk):
    """The continuations one Celery task generates: ``items`` are ``[branch id, first
    sample, samples]``."""

    job = models.ForeignKey(RolloutJob, on_delete=models.CASCADE, related_name="chunks")
    items = models.JSONField(default=list)

    class Meta:
        ordering: ClassVar = ["job", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["job", "number"], name="rolloutchunk_unique_number")
        ]

    def __str__(self) -> str:
        return f"chunk {self.number} of job {self.job_id}"

    @property
    def continuations(self) -> int:
        return sum(int(samples) for _, _, samples in self.items)


class Continuation(models.Model):
    """Links a continuation (an ordinary trajectory, imported with its parent and branch
    index) to the branch that produced it."""

    trajectory = models.OneToOneField(
        Trajectory, primary_key=True, on_delete=models.CASCADE, related_name="continuation"
    )
    branch = models.ForeignKey(
        RolloutBranch, on_delete=models.CASCADE, related_name="continuations"
    )
    sample = models.PositiveIntegerField()
    success = models.BooleanField()
    finish_reason = models.CharField(max_length=10)
    new_tokens = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["branch", "sample"], name="continuation_unique_sample")
        ]

    def __str__(self) -> str:
        return f"continuation {self.trajectory_id} of branch {self.branch_id}"


class StepMC(models.Model):
    """A step's Monte Carlo value under a policy: of ``k`` continuations of the prefix
    ending at the step, ``successes`` reached the right answer. Hard: any did; soft: the
    fraction. Every step with the same prefix hash shares the value. The label source
    ``mc`` reads these."""

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="mc_values")
    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="mc_values")
    job = models.ForeignKey(
        RolloutJob, null=True, blank=True, on_delete=models.SET_NULL, related_name="mc_values"
    )
    k = models.PositiveIntegerField()
    successes = models.PositiveIntegerField()
    soft = models.FloatField()
    hard = models.BooleanField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "step MC value"
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["step", "policy"], name="stepmc_unique_per_policy"),
            models.CheckConstraint(
                condition=Q(soft__gte=0) & Q(soft__lte=1), name="stepmc_soft_0_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.successes}/{self.k} on {self.step_id} by {self.policy_id}"


class DemoPolicyTraining(Job):
    """The demo policy trained on a worker after `make run` has served its first page,
    then the demo project's rollout jobs queued (``rollout_tasks`` of its tasks). The
    project's rollouts section shows its progress while it runs."""

    KIND = "demo policy training"

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="demo_policy_trainings"
    )
    rollout_tasks = models.PositiveIntegerField()
    # Most training steps (the demo's default; tests train a step or two).
    max_steps = models.PositiveIntegerField(default=1200)
    # How far training has got, by steps or by its time budget, whichever is further.
    percent = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering: ClassVar = ["-id"]

    def __str__(self) -> str:
        return f"demo policy training {self.pk} ({self.status})"
