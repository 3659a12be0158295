"""Projects, members, trajectories, their steps and where they came from."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings as django_settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import JSONField, Value
from django.db.models.functions import MD5, Now

from stepscope.jobs.models import Job


class Project(models.Model):
    slug = models.SlugField(max_length=80, unique=True)
    name = models.CharField(max_length=200)
    guidelines = models.TextField(blank=True, help_text="Markdown shown to annotators.")
    # Blind labeling, labels wanted per step, whether annotators see model scores.
    settings = models.JSONField(default=dict, blank=True)
    # Set when an admin deletes the project: from then on nobody sees it, and a worker
    # removes its rows in batches (ProjectDeletion).
    deleting_since = models.DateTimeField(null=True, blank=True)
    members: models.ManyToManyField = models.ManyToManyField(
        django_settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        ANNOTATOR = "annotator"
        RESEARCHER = "researcher"
        ADMIN = "admin"

    user = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.ANNOTATOR)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["user", "project"], name="membership_unique_user_project"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} as {self.role}"


class MembershipEvent(models.Model):
    """One change to a project's members, kept for the members page: who made it, when,
    and what (the member's role before and after; blank where there was none). The member
    is named by username too, so the record outlives the account."""

    class Action(models.TextChoices):
        ADDED = "added"
        ROLE_CHANGED = "role_changed"
        REMOVED = "removed"
        # Through an invite link: the actor is the admin who made the link.
        JOINED = "joined"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="membership_events")
    actor = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    member = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    member_username = models.CharField(max_length=150)
    action = models.CharField(max_length=20, choices=Action.choices)
    role_before = models.CharField(max_length=20, blank=True)
    role_after = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]
        indexes: ClassVar = [
            models.Index(fields=["project", "-created_at"], name="membership_event_project")
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.member_username} in {self.project}"


class MembershipInvite(models.Model):
    """A one-time link that lets someone make an account and join with ``role``. Only a
    SHA-256 digest of the link's secret is kept; the admin sees the link once."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invites")
    role = models.CharField(max_length=20, choices=Membership.Role.choices)
    secret_digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"invite to {self.project} as {self.role}"


class ProjectDeletion(Job):
    """A project being deleted in the background, and what was removed. It outlives
    the project (its slug and name are copied) so the page can say what went."""

    KIND = "project deletion"

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="deletions"
    )
    slug = models.SlugField(max_length=80)
    name = models.CharField(max_length=200)
    # Steps in the project when the deletion started, and steps removed so far.
    total_steps = models.PositiveBigIntegerField(default=0)
    removed_steps = models.PositiveBigIntegerField(default=0)
    # {"trajectories": 50000, "steps": 1000000, "step labels": 20, ...}: rows removed.
    removed = models.JSONField(default=dict, blank=True)
    # {"scoring": 2, "import": 1}: the project's jobs that were queued or running when
    # the deletion started, cancelled by it.
    cancelled = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"deletion of {self.slug}"


class ImportBatch(Job):
    KIND = "import"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="import_batches")
    file_name = models.CharField(max_length=500)
    source_format = models.CharField(max_length=40)
    # An import through the API or the command line runs at once; an upload is queued.
    status = models.CharField(max_length=10, choices=Job.Status.choices, default=Job.Status.RUNNING)
    # An uploaded file waiting for (or being read by) a worker, under MEDIA_ROOT.
    stored_path = models.CharField(max_length=500, blank=True)
    mapping = models.JSONField(null=True, blank=True)
    skip_invalid = models.BooleanField(default=False)
    # Written by an app's own job through the import machinery (a rollout job's
    # continuations), not by a person: such batches are listed where that job is (the
    # rollouts section), not among the project's imports.
    internal = models.BooleanField(default=False, db_default=False)
    # Records read so far, written from outside the import transaction for progress bars.
    processed_count = models.PositiveIntegerField(default=0)
    file_size = models.PositiveBigIntegerField(null=True, blank=True)
    created_count = models.PositiveIntegerField(default=0)
    unchanged_count = models.PositiveIntegerField(default=0)
    rejected_count = models.PositiveIntegerField(default=0)
    step_count = models.PositiveIntegerField(default=0)
    # [{"location": "line 3", "field": "steps.0.content", "message": "is missing"}, ...]
    errors = models.JSONField(default=list, blank=True)

    class Meta:
        ordering: ClassVar = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.file_name} ({self.source_format})"


class Trajectory(models.Model):
    # No index of its own: every (project, ...) index below serves lookups by project.
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="trajectories", db_index=False
    )
    external_id = models.CharField(max_length=300, blank=True)
    source_format = models.CharField(max_length=40)
    # Groups rollouts of the same task or prompt.
    task_key = models.CharField(max_length=300, blank=True)
    task = models.TextField(blank=True)
    ground_truth = models.TextField(blank=True)
    model_name = models.CharField(max_length=200, blank=True)
    outcome_reward = models.FloatField(null=True, blank=True)
    success = models.BooleanField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    content_hash = models.CharField(max_length=64)
    import_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="trajectories"
    )
    # A rollout that continues another trajectory from one of its steps. Its index
    # (traj_parent) holds only the trajectories that have a parent.
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_index=False,
    )
    branch_index = models.PositiveIntegerField(null=True, blank=True)
    # An RL rollout's policy (weight) version and the trainer's step that used it; blank
    # and null where unknown (everything that is not a trainer's rollout).
    policy_version = models.CharField(max_length=200, blank=True, default="", db_default="")
    training_step = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            # The hash leads so that an import's duplicate check can only be served by
            # this index (imports._existing_hashes); the project indexes would make it
            # scan the project while statistics still say the project is empty.
            models.UniqueConstraint(
                fields=["content_hash", "project"], name="trajectory_unique_content_per_project"
            )
        ]
        indexes: ClassVar = [
            # The list page pages by id within a project, newest first.
            models.Index(fields=["project", "-id"], name="traj_project_id"),
            models.Index(fields=["project", "task_key"], name="traj_project_task"),
            models.Index(fields=["project", "model_name"], name="traj_project_model"),
            models.Index(fields=["project", "success"], name="traj_project_success"),
            models.Index(fields=["project", "step_count"], name="traj_project_length"),
            models.Index(fields=["project", "external_id"], name="traj_project_external"),
            # Metadata conditions (``metadata.run = "a"``): an equality is also asked as
            # containment, which this index answers (trajectories.metadata_sql), so a
            # selection by metadata reads the trajectories it selects, not all of them.
            GinIndex(fields=["metadata"], opclasses=["jsonb_path_ops"], name="traj_metadata"),
            # Rollouts of the same task text (whatever their task keys): where steps that
            # share a prefix are looked for (rollouts/services/chunks.py). The digest
            # leads so that lookup can use no other index; it keeps long tasks out too.
            models.Index(MD5("task"), "project", name="traj_task_md5_project"),
            # Children of a trajectory (and the key's SET NULL when one is deleted). Most
            # trajectories have no parent, and an import need not index them.
            models.Index(
                fields=["parent"], name="traj_parent", condition=models.Q(parent__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return self.external_id or f"trajectory {self.pk}"


class TrajectorySource(models.Model):
    """The raw source record, in its own table so list queries never load it."""

    trajectory = models.OneToOneField(
        Trajectory, primary_key=True, on_delete=models.CASCADE, related_name="source"
    )
    location = models.CharField(max_length=100, blank=True)
    raw = models.JSONField(null=True)

    def __str__(self) -> str:
        return f"source of {self.trajectory_id} ({self.location})"


class Step(models.Model):
    class Kind(models.TextChoices):
        MESSAGE = "message"
        THOUGHT = "thought"
        ACTION = "action"
        TOOL_CALL = "tool_call"
        TOOL_RESULT = "tool_result"
        OBSERVATION = "observation"
        ANSWER = "answer"

    # No index of its own: the (trajectory, index) unique constraint's index serves every
    # lookup by trajectory, and each extra index slows every import.
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.MESSAGE)
    role = models.CharField(max_length=40, blank=True)
    agent = models.CharField(max_length=100, blank=True)
    content = models.TextField(blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    tool_args = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    labelable = models.BooleanField(default=True)
    # sha256 over the task and steps 0..index: equal for rollouts sharing this prefix.
    prefix_hash = models.CharField(max_length=64)
    # What an RL trainer knew about the step (formats/base.py, StepTraining): blank and
    # null where unknown. Token logprobs are kept only when an import asks for them.
    policy_version = models.CharField(max_length=200, blank=True, default="", db_default="")
    training_step = models.IntegerField(null=True, blank=True)
    logprob_sum = models.FloatField(null=True, blank=True)
    logprob_mean = models.FloatField(null=True, blank=True)
    logprob_min = models.FloatField(null=True, blank=True)
    advantage = models.FloatField(null=True, blank=True)
    # The step's return (discounted or Monte Carlo, as the trainer computed it).
    returns = models.FloatField(null=True, blank=True)
    token_logprobs = models.JSONField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["trajectory_id", "index"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["trajectory", "index"], name="step_unique_index")
        ]
        # No index on prefix_hash: steps sharing a prefix are at the same index of
        # trajectories with the same task (the hash chain starts from the task text), so
        # they are found through the trajectory's (md5(task), project) index and the
        # unique index above. An index on every step's hash cost an import more than a
        # third of its database time (bench/ingest.py).

    def __str__(self) -> str:
        return f"step {self.index} of {self.trajectory_id}"

    @property
    def has_training(self) -> bool:
        """Whether an RL trainer left any facts on the step (the page shows them)."""
        return bool(self.policy_version) or any(
            value is not None
            for value in (
                self.training_step,
                self.logprob_sum,
                self.logprob_mean,
                self.logprob_min,
                self.advantage,
                self.returns,
            )
        )


class FollowSource(models.Model):
    """A folder watched for a trainer's files: each pass imports every file of the format
    that is new or grew since (``FollowedFile``). ``import_trajectories --follow`` runs
    the passes of the folder it names; a folder a project admin added in the app
    (``by_worker``) is passed over by the worker, every few seconds, from Celery beat."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="follow_sources")
    # The folder's absolute path on the machine that runs the command.
    path = models.CharField(max_length=1000)
    source_format = models.CharField(max_length=40)
    skip_invalid = models.BooleanField(default=False)
    by_worker = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # When a pass last looked at the folder, and what the latest pass found.
    last_pass_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar = ["path"]
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "path", "source_format"], name="follow_source_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.source_format}) into {self.project}"


class FollowedFile(models.Model):
    """How far a followed folder's file is imported: the bytes ``imported_bytes`` of it
    (whole lines, for JSON Lines a trainer appends to), whose SHA-256 is
    ``imported_sha256``, as the file was at ``mtime``. It is written in the transaction
    that imports them, so a restart never imports a part twice. ``seen_*`` is the file
    as the last pass found it, so a file that failed is retried only once it changes."""

    source = models.ForeignKey(FollowSource, on_delete=models.CASCADE, related_name="files")
    # Relative to the source's folder.
    path = models.CharField(max_length=1000)
    imported_bytes = models.PositiveBigIntegerField(default=0)
    imported_sha256 = models.CharField(max_length=64, blank=True)
    imported_lines = models.PositiveBigIntegerField(default=0)
    mtime = models.FloatField(null=True, blank=True)
    seen_size = models.PositiveBigIntegerField(default=0)
    seen_mtime = models.FloatField(null=True, blank=True)
    trajectories = models.PositiveIntegerField(default=0)
    last_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar = ["source_id", "path"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["source", "path"], name="followed_file_unique")
        ]

    def __str__(self) -> str:
        return f"{self.path} of {self.source_id}"


class TrajectorySearch(models.Model):
    """The search document of a trajectory's task text, and the mark that its steps have
    their ``StepSearch`` rows: the search index is built after an import commits, by a
    worker (``trajectory_search_index``), so that no import pays for it. A trajectory
    without a row is searched by reading its text (``trajectories.search``)."""

    # No database constraint, as on StepSearch: the benches (and anyone) may delete a
    # project's trajectories with plain SQL while a worker indexes them; a row left
    # behind names an id that is never reused, and the ORM's cascade removes the rest.
    trajectory = models.OneToOneField(
        Trajectory,
        primary_key=True,
        on_delete=models.CASCADE,
        db_constraint=False,
        related_name="+",
    )
    document = SearchVectorField()

    class Meta:
        indexes: ClassVar = [GinIndex(fields=["document"], name="trajsearch_document")]

    def __str__(self) -> str:
        return f"search document of {self.trajectory_id}"


class StepSearch(models.Model):
    """One step's search document (its first ``SEARCH_CHARS`` characters). Steps never
    change after an import, so a row is written once. No relation to ``Step``: a step
    goes only with its trajectory, whose deletion removes these rows by the
    ``trajectory_id`` index without loading a step."""

    step_id = models.BigIntegerField(primary_key=True)
    trajectory = models.ForeignKey(
        Trajectory, on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    document = SearchVectorField()

    class Meta:
        indexes: ClassVar = [GinIndex(fields=["document"], name="stepsearch_document")]

    def __str__(self) -> str:
        return f"search document of step {self.step_id}"


class LiveTrace(models.Model):
    """A trace arriving over OTLP (``POST /v1/traces``): how many of its spans are staged,
    how many the assembler has turned into its trajectory, and when the last one came.
    A trace is pending while ``span_count > assembled_count``; it counts as finished once
    its root span came and ``STEPSCOPE_OTLP_QUIET_SECONDS`` passed without a new span."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    trace_id = models.CharField(max_length=32)
    trajectory = models.OneToOneField(
        Trajectory, null=True, blank=True, on_delete=models.SET_NULL, related_name="live_trace"
    )
    # Spans staged, and spans the trajectory was last built from.
    span_count = models.PositiveIntegerField(default=0, db_default=0)
    assembled_count = models.PositiveIntegerField(default=0, db_default=0)
    # The last staged span (StagedSpan.id) the trajectory was built from: a trace's spans
    # are staged in the order their requests commit, each under this row's lock, so the
    # ones after it are the ones not yet assembled.
    assembled_through = models.BigIntegerField(default=0, db_default=0)
    # What the next assembly needs to append steps without reading the earlier ones
    # (trajectories.services.assembly); null: build the trace again from all its spans.
    state = models.JSONField(null=True, blank=True)
    root_seen = models.BooleanField(default=False, db_default=False)
    first_span_at = models.DateTimeField(db_default=Now())
    last_span_at = models.DateTimeField(db_default=Now())
    assembled_at = models.DateTimeField(null=True, blank=True)
    # Staged spans the mapping could not read: [{"span_id", "field", "message"}].
    errors = models.JSONField(default=list, db_default=Value([], JSONField()), blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "trace_id"], name="livetrace_unique_trace")
        ]
        indexes: ClassVar = [
            # The assembler's work list: only pending traces are in it.
            models.Index(
                fields=["last_span_at"],
                name="livetrace_pending",
                condition=models.Q(span_count__gt=models.F("assembled_count")),
            )
        ]

    def __str__(self) -> str:
        return f"live trace {self.trace_id}"


class StagedSpan(models.Model):
    """One span as the OTLP receiver accepted it (OTLP JSON's shape, attributes flat),
    kept until and after its trace is assembled: the receiver only inserts here, so
    accepting is durable, and the unique key makes an exporter's retry change nothing."""

    id = models.BigAutoField(primary_key=True)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+", db_index=False)
    trace_id = models.CharField(max_length=32)
    span_id = models.CharField(max_length=16)
    received_at = models.DateTimeField(db_default=Now())
    record = models.JSONField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "trace_id", "span_id"], name="stagedspan_unique_span"
            )
        ]

    def __str__(self) -> str:
        return f"span {self.span_id} of trace {self.trace_id}"


class LiveAssembly(models.Model):
    """One row (id 1): when an assembly task was last queued and has not started yet.
    Requests queue a task only when none is, so a burst of spans costs one task; a task
    that never started (a lost message) is replaced after ``STALE_SECONDS``."""

    STALE_SECONDS = 30

    id = models.PositiveSmallIntegerField(primary_key=True)
    queued_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"assembly queued at {self.queued_at}"


__all__ = [
    "FollowSource",
    "FollowedFile",
    "ImportBatch",
    "LiveAssembly",
    "LiveTrace",
    "Membership",
    "Project",
    "StagedSpan",
    "Step",
    "StepSearch",
    "Trajectory",
    "TrajectorySearch",
    "TrajectorySource",
]
