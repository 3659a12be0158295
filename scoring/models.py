"""Scorers, scoring runs (and head training runs), and the step scores they write."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from labeling.models import RubricMark
from scoring import prm
from stepscope.jobs.models import Chunk, ChunkedJob
from trajectories.models import Project, Step, Trajectory


class ModelReference(models.Model):
    """A model as configured: a reference to load (a local directory or hub id) and its
    revision, typed parameters, the queue whose workers run it, and whether it may run
    its own code. Scorers and policies (``rollouts.models.Policy``) are references; one
    check (``scoring.references.reference_check``) passes them before they are saved,
    and the workers load them through ``scoring.prm.model_refs``."""

    name = models.CharField(max_length=100)
    # A directory on the workers or a hub id; for a trained head, its encoder; for a
    # remote judge, the endpoint's model name.
    model_ref = models.CharField(max_length=500, blank=True)
    # The hub revision of the model, or the number of a trained head's revision.
    revision = models.CharField(max_length=100, blank=True)
    # The kind's typed parameters (scoring.prm.base.ScorerParams, a judge's JudgeParams,
    # rollouts.generation.PolicyParams), as given: defaults are filled in when read.
    parameters = models.JSONField(default=dict, blank=True)
    trust_remote_code = models.BooleanField(default=False)
    queue = models.CharField(max_length=50, default="gpu")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        ordering: ClassVar = ["name", "-id"]


class Scorer(ModelReference):
    """A process reward model (or judge) as configured: a kind (``scoring.prm.kinds``),
    model reference and parameters.

    A scorer with no project is offered to every project; a project's own scorers (its
    trained heads, scores imported into it) belong to that project. Training a head
    again adds a new revision under the same name.
    """

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="scorers"
    )
    # Every registered kind, in the order registered (a new kind needs no migration).
    kind = models.CharField(max_length=30, choices=prm.kind_choices)
    # A trained head's weights and its training metrics.
    artifact = models.JSONField(null=True, blank=True, editable=False)

    class Meta(ModelReference.Meta):
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
        return prm.kind_get(self.kind).runs


class ScoringRun(ChunkedJob):
    """One scoring pass over a selection of a project's steps (``score``), a head
    training (``train``) or a file of scores computed elsewhere (``import``)."""

    class Kind(models.TextChoices):
        SCORE = "score"
        TRAIN = "train"
        IMPORT = "import"

    KIND = "scoring"
    RATE_FIELD = "steps_per_second"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="scoring_runs")
    # A training run gets its scorer (the new revision) when it finishes.
    scorer = models.ForeignKey(
        Scorer, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.SCORE)
    # {"only_unscored": bool, "trajectory_ids": [...], "filters": {...}}
    selection = models.JSONField(default=dict, blank=True)
    # Training: name, neutral handling, holdout, encoder and its parameters.
    parameters = models.JSONField(default=dict, blank=True)
    truncated = models.PositiveIntegerField(default=0)
    steps_per_second = models.FloatField(null=True, blank=True)
    # Training: held-out AUROC, F1, ProcessBench first-error F1 and counts. A judge run:
    # its mode and cost (calls, retries, prompt and completion tokens, parse failures).
    metrics = models.JSONField(default=dict, blank=True)
    # The prompt version a judge run asked with.
    prompt = models.ForeignKey(
        "JudgePrompt", null=True, blank=True, on_delete=models.RESTRICT, related_name="runs"
    )

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]
        indexes: ClassVar = [models.Index(fields=["project", "-id"], name="scoringrun_project_id")]

    def __str__(self) -> str:
        return f"{self.kind} run {self.pk} ({self.status})"


class ScoringChunk(Chunk):
    """The steps one Celery task scores."""

    run = models.ForeignKey(ScoringRun, on_delete=models.CASCADE, related_name="chunks")
    trajectory_ids = models.JSONField(default=list)
    step_ids = models.JSONField(default=list)

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


class JudgePrompt(models.Model):
    """One version of a judge's prompt. Versions are never edited: a change is a new row
    with the next number, and every run records the version it asked with."""

    scorer = models.ForeignKey(Scorer, on_delete=models.CASCADE, related_name="prompts")
    version = models.PositiveIntegerField()
    # str.format text over the placeholders of the judge's mode (scoring/judges/config.py).
    system = models.TextField(blank=True)
    template = models.TextField()
    note = models.CharField(max_length=200, blank=True)
    # Ids of the steps this version shows as few-shot examples (chosen on the judge
    # alignment page): their trajectories are left out of this version's metrics, which
    # would otherwise grade the judge on answers it was given.
    example_steps = models.JSONField(default=list, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["scorer", "-version"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["scorer", "version"], name="judgeprompt_unique_version")
        ]

    def __str__(self) -> str:
        return f"{self.scorer_id} prompt v{self.version}"


class JudgeReply(models.Model):
    """One answer of a judge in a run: a step's (per-step and step-by-step modes) or a
    trajectory's (trajectory, all-at-once and binary-search modes, ``step`` null). Stored
    as it arrives, so a redelivered chunk asks again only what has no reply. A reply the
    parser could not read keeps its text and ``parse_error`` and gives no score and no
    verdict."""

    run = models.ForeignKey(ScoringRun, on_delete=models.CASCADE, related_name="replies")
    scorer = models.ForeignKey(Scorer, on_delete=models.CASCADE, related_name="replies")
    prompt = models.ForeignKey(JudgePrompt, on_delete=models.RESTRICT, related_name="replies")
    # "s<step id>" or "t<trajectory id>"; the attribution modes' "t<trajectory id>",
    # "t<trajectory id>:s<step index>", "t<trajectory id>:b<first>-<last index>". Unique
    # in the run.
    key = models.CharField(max_length=40)
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="judge_replies"
    )
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="judge_replies"
    )
    # Untrusted model output: escaped wherever shown.
    text = models.TextField()
    critique = models.TextField(blank=True)
    # Per-step: +1, 0 or -1. Trajectory: the first wrong step's number, -1 for none.
    # All-at-once: the decisive step's index; step-by-step: 1 yes, 0 no; binary-search:
    # 0 the first half, 1 the second.
    verdict = models.IntegerField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    parse_error = models.CharField(max_length=300, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    latency_ms = models.FloatField(default=0)
    finish_reason = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["run", "id"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["run", "key"], name="judgereply_unique_key"),
        ]
        indexes: ClassVar = [
            models.Index(fields=["scorer", "step"], name="judgereply_scorer_step"),
            models.Index(fields=["trajectory", "scorer"], name="judgereply_trajectory"),
        ]

    def __str__(self) -> str:
        return f"reply {self.key} in run {self.run_id}"

    @property
    def parsed(self) -> bool:
        return not self.parse_error


class AttributionRun(ChunkedJob):
    """Credit assignment over a selection of a project's steps by one method, or token
    saliency inside one step (``token-saliency``, its result in ``metrics``).

    ``key`` digests the method, its parameters, the inputs (scorer and revision, label
    source) and the selection; it is unique per project, so running the same thing again
    reuses the run and replaces its credits instead of adding a second set.
    """

    class Method(models.TextChoices):
        PRM_DELTA = "prm-delta"
        AGGREGATE = "aggregate"
        RETURNS = "returns"
        GAE = "gae"
        MC_PREFIX = "mc-prefix"
        GROUP_RELATIVE = "group-relative"
        FIRST_ERROR = "first-error"
        LEAVE_ONE_OUT = "leave-one-out"
        SHAPLEY = "shapley"
        TOKEN_SALIENCY = "token-saliency"

    KIND = "attribution"
    RATE_FIELD = "steps_per_second"
    # Methods that run a model, on the scorer's queue, in chunks.
    MODEL_METHODS: ClassVar = (Method.LEAVE_ONE_OUT, Method.SHAPLEY, Method.TOKEN_SALIENCY)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="attribution_runs")
    method = models.CharField(max_length=20, choices=Method.choices)
    # Normalised: every parameter of the method with its value, defaults included.
    parameters = models.JSONField(default=dict, blank=True)
    scorer = models.ForeignKey(
        Scorer, null=True, blank=True, on_delete=models.CASCADE, related_name="attribution_runs"
    )
    # The scorer's revision when the run was made (a trained head's revision number).
    scorer_revision = models.CharField(max_length=100, blank=True)
    # A label source (labeling/sources.py) whose values are the step rewards, or "".
    label_source = models.CharField(max_length=200, blank=True)
    # {"trajectory_ids": [...], "filters": {...}} or {"step": id} for token saliency.
    selection = models.JSONField(default=dict, blank=True)
    key = models.CharField(max_length=64)
    steps_per_second = models.FloatField(null=True, blank=True)
    # Counts, timings (read, maths, write) and what the method reports: Shapley
    # efficiency gaps, the AUROC of an aggregate against success, a saliency map.
    metrics = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "key"], name="attributionrun_unique_key")
        ]
        indexes: ClassVar = [
            models.Index(fields=["project", "-id"], name="attributionrun_project_id")
        ]

    def __str__(self) -> str:
        return f"{self.method} run {self.pk} ({self.status})"

    @property
    def runs_a_model(self) -> bool:
        return self.method in self.MODEL_METHODS


class AttributionChunk(Chunk):
    """The trajectories one Celery task attributes with a model."""

    run = models.ForeignKey(AttributionRun, on_delete=models.CASCADE, related_name="chunks")
    trajectory_ids = models.JSONField(default=list)
    # Steps the chunk credits (its trajectories' players), for progress.
    steps = models.PositiveIntegerField(default=0)

    class Meta:
        ordering: ClassVar = ["run", "number"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["run", "number"], name="attributionchunk_unique_number")
        ]

    def __str__(self) -> str:
        return f"chunk {self.number} of attribution run {self.run_id}"


class StepCredit(models.Model):
    """How much credit one method gave one step. One per (step, run): rerunning a run
    replaces its credits.

    ``level`` is the value the credit is a change of, where the method has one: the
    scorer's value V_t for ``prm-delta`` and ``gae``, the prefix's Monte Carlo value for
    ``mc-prefix``, the value that crossed the line for ``first-error``. ``detail`` holds
    what model methods add per step (a Shapley value's standard error, the agent whose
    value a step shares).
    """

    # Credits are derived data, rewritten a million at a time, so the database does not
    # check their foreign keys: row-by-row checks made a million-credit COPY five times
    # slower (15.5 s against 3.2 s). Django's cascades still delete a step's or a run's
    # credits, runs write credits only while they hold their run's row lock, every read
    # joins credits to live steps, and ids are never reused, so a credit left behind by a
    # raw SQL delete is never shown. The unique constraint's index leads with the step, so
    # the step needs no index of its own. The (run, step) index serves deletes and listings
    # by run, and finds a run's credits on one trajectory as a range of step ids: which
    # runs credit a trajectory is a probe per run, not a pass over every credit (#37).
    step = models.ForeignKey(
        Step,
        on_delete=models.CASCADE,
        related_name="credits",
        db_index=False,
        db_constraint=False,
    )
    run = models.ForeignKey(
        AttributionRun,
        on_delete=models.CASCADE,
        related_name="credits",
        db_index=False,
        db_constraint=False,
    )
    value = models.FloatField()
    level = models.FloatField(null=True, blank=True)
    detail = models.JSONField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["step", "run"], name="stepcredit_unique_per_run")
        ]
        indexes: ClassVar = [models.Index(fields=["run", "step"], name="stepcredit_run_step")]

    def __str__(self) -> str:
        return f"{self.value:+.3f} on {self.step_id} by run {self.run_id}"


class FailureVerdict(models.Model):
    """A model's trajectory-level failure attribution: which agent, at which step,
    decided that the run failed (the Who&When task), as the label source
    ``model:<scorer>``. One per (trajectory, scorer): judging again replaces it. An
    LLM judge's failure-attribution run writes these with
    ``scoring.services.failure_attributions.failure_verdicts_write``; the compare pages set them
    against a human's or an import's decisive-failure labels
    (``labeling.TrajectoryLabel.decisive_*``)."""

    trajectory = models.ForeignKey(
        "trajectories.Trajectory", on_delete=models.CASCADE, related_name="failure_verdicts"
    )
    scorer = models.ForeignKey(Scorer, on_delete=models.CASCADE, related_name="failure_verdicts")
    # Empty and null: the model named no agent or no step.
    agent = models.CharField(max_length=200, blank=True, db_default="")
    step = models.PositiveIntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, db_default="")
    confidence = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "scorer"], name="failureverdict_unique_per_scorer"
            )
        ]
        indexes: ClassVar = [models.Index(fields=["scorer"], name="failureverdict_scorer")]

    def __str__(self) -> str:
        return f"{self.agent or '?'} at {self.step} on {self.trajectory_id} by {self.scorer_id}"


class EvidenceChoice(models.Model):
    """Which scorer's scores and which attribution run's credits one user sees beside the
    steps of a project's trajectories, as last picked on a trajectory page. A page's
    ``?scorer=`` and ``?credit=`` win over it; without either, the project's default
    (the scorer that last finished scoring, the newest run) is shown."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evidence_choices"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    scorer = models.ForeignKey(Scorer, null=True, blank=True, on_delete=models.SET_NULL)
    credit_run = models.ForeignKey(
        AttributionRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["user", "project"], name="evidencechoice_unique_per_user_project"
            )
        ]

    def __str__(self) -> str:
        picked = f"scorer {self.scorer_id}, run {self.credit_run_id}"
        return f"{self.user_id} in {self.project_id}: {picked}"


class JudgeRubricMark(models.Model):
    """An LLM judge's mark on one criterion of one rubric version for one trajectory, with
    its evidence steps: what a judge run in the ``rubric`` mode writes (the rubric source
    ``judge:<scorer>``, set against people's marks, ``labeling.RubricMark``). One per
    (trajectory, scorer, rubric version, criterion): judging again replaces it. Written by
    ``scoring.services.rubric_marks.judge_rubric_marks_write``."""

    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="judge_rubric_marks"
    )
    scorer = models.ForeignKey(Scorer, on_delete=models.CASCADE, related_name="rubric_marks")
    rubric = models.ForeignKey(
        "labeling.Rubric", on_delete=models.RESTRICT, related_name="judge_marks"
    )
    run = models.ForeignKey(
        ScoringRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="rubric_marks"
    )
    # The reply it was read from (its critique and raw text).
    reply = models.ForeignKey(
        JudgeReply, null=True, blank=True, on_delete=models.SET_NULL, related_name="rubric_marks"
    )
    criterion = models.PositiveIntegerField()
    mark = models.CharField(max_length=10, choices=RubricMark.Mark.choices)
    # Step indexes of the trajectory, sorted.
    evidence = ArrayField(models.PositiveIntegerField(), default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "scorer", "rubric", "criterion"],
                name="judgerubricmark_unique_per_scorer",
            )
        ]
        indexes: ClassVar = [
            models.Index(fields=["rubric", "scorer"], name="judgerubricmark_rubric_scorer")
        ]

    def __str__(self) -> str:
        where = f"criterion {self.criterion} of {self.trajectory_id}"
        return f"{self.mark} on {where} by {self.scorer_id}"
