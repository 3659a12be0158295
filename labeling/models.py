"""Label schemas, step labels, trajectory verdicts, adjudicated labels and labeling queues.

Imported labels (ProcessBench, PRM800K, ...) are step labels by a non-login annotator named
after their source, e.g. ``import:processbench``; the importer writes them with ``COPY``, so
every NOT NULL column added here carries a database default (``db_default``).

Every change to a step label, a trajectory label or a final label is kept by a
statement-level trigger (django-pghistory) in an event table: nothing an annotator submits
is ever lost, undo reads the previous value from there, and the step history page shows it.
Statement-level triggers keep a bulk ``COPY`` of imported labels fast (one insert into the
event table per statement, not one per row).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import pghistory
import pgtrigger
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from labeling.rubric_models import (  # noqa: F401  (Django finds the models here)
    EpisodeVerdict,
    EpisodeVerdictEvent,
    Rubric,
    RubricMark,
    RubricMarkEvent,
)
from trajectories.models import Project, Step, Trajectory

TERNARY_VALUES = [
    {"value": -1, "name": "bad", "color": "#d64545", "key": "1"},
    {"value": 0, "name": "neutral", "color": "#9a9a9a", "key": "2"},
    {"value": 1, "name": "good", "color": "#2f9e44", "key": "3"},
]
BINARY_VALUES = [
    {"value": -1, "name": "incorrect", "color": "#d64545", "key": "1"},
    {"value": 1, "name": "correct", "color": "#2f9e44", "key": "2"},
]
DEFAULT_ERROR_TAGS = [
    "calculation error",
    "logic error",
    "wrong tool",
    "bad tool arguments",
    "hallucinated fact",
    "misread the task",
    "redundant step",
    "unrecoverable",
    "correctable",
]
# The keys the labeling page binds for itself (static/stepscope/labeling.js, the keydown
# handler; tests/labeling/test_reserved_keys.py reads the script and keeps the two the
# same). A schema value may not take one, in either case (Caps Lock sends "J" for j).
RESERVED_KEYS: tuple[str, ...] = (
    *("j", "k", "?", "g", "f", "t", "r", "c", "u", "h", "s", "d", "n"),
    # The rubric and episode-verdict panels (static/stepscope/rubrics.js).
    *("b", "m", "e", "v"),
)
_RESERVED_MEANINGS = {
    "j": "next step",
    "k": "previous step",
    "?": "shortcuts",
    "g": "guidelines",
    "f": "first error",
    "t": "error tags",
    "r": "rationale",
    "c": "correction",
    "u": "undo",
    "h": "history",
    "s": "submit",
    "d": "decisive failure",
    "n": "next queue item",
    "b": "next rubric criterion",
    "m": "rubric mark",
    "e": "rubric evidence",
    "v": "episode verdict",
}


def reserved_key_error(key: str) -> str | None:
    """Why ``key`` cannot be a schema value's key, or None when it can."""
    if key.lower() in RESERVED_KEYS:
        reserved = " ".join(RESERVED_KEYS)
        meaning = _RESERVED_MEANINGS[key.lower()]
        return (
            f"key {key!r} is a labeling shortcut ({meaning}); keys the labeling page"
            f" uses: {reserved}"
        )
    return None


def schema_values_key_error(values: Any) -> str | None:
    """The first reserved key among a schema's ``values``, said with the value it is on."""
    for position, entry in enumerate(values or []):
        if not isinstance(entry, dict):
            continue
        problem = reserved_key_error(str(entry.get("key") or ""))
        if problem is not None:
            name = entry.get("name") or entry.get("value")
            return f"values.{position} ({name}): {problem}"
    return None


_HEX_COLOR = re.compile(r"#[0-9a-fA-F]{3,8}")
_FALLBACK_COLOR = "#6b7280"


APPLIES_TO_KEYS = ("kinds", "roles", "agents")


def applies_to_error(applies_to: Any) -> str | None:
    """What is wrong with a schema's ``applies_to``, or None: an object whose keys are
    among ``APPLIES_TO_KEYS``, each a list of names (step kinds, roles, agents)."""
    if not isinstance(applies_to, dict):
        return "applies_to is an object of kinds, roles and agents"
    for key, names in applies_to.items():
        if key not in APPLIES_TO_KEYS:
            return f"applies_to.{key} is not one of {', '.join(APPLIES_TO_KEYS)}"
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            return f"applies_to.{key} is a list of names"
    kinds = set(applies_to.get("kinds") or []) - set(Step.Kind.values)
    if kinds:
        return (
            f"applies_to.kinds: {', '.join(sorted(kinds))} is no step kind"
            f" (kinds: {', '.join(Step.Kind.values)})"
        )
    return None


def schema_keys_clash(values: Any, others: list[LabelSchema]) -> str | None:
    """The first of ``values``' keys that another active schema of the project labels
    with (in either case): on the labeling page one key labels one schema."""
    taken: dict[str, LabelSchema] = {}
    for other in others:
        for entry in other.entries:
            if entry["key"]:
                taken.setdefault(entry["key"].lower(), other)
    for position, entry in enumerate(values or []):
        if not isinstance(entry, dict) or not entry.get("key"):
            continue
        holder = taken.get(str(entry["key"]).lower())
        if holder is not None:
            name = entry.get("name") or entry.get("value")
            return (
                f"values.{position} ({name}): key {entry['key']!r} labels {holder.name!r}"
                " already; each schema of a project needs its own keys"
            )
    return None


class LabelSchema(models.Model):
    """One version of one of a project's step-label schemas (its label dimensions:
    correctness, error type, severity, ...). A schema is identified by project and name;
    editing its values or tags makes a new version (the old row stays, with the labels
    that point to it) and only the newest active version of each name is offered for
    labeling. A project may have several active schemas, each with its own keys."""

    class Kind(models.TextChoices):
        TERNARY = "ternary"
        BINARY = "binary"
        ORDINAL = "ordinal"
        CATEGORICAL = "categorical"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="label_schemas")
    name = models.CharField(max_length=100, default="step quality")
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.TERNARY)
    # [{"value": -1, "name": "bad", "color": "#d64545", "key": "1", "error": true}, ...]
    # "error" marks the value that counts as an error (first-error mode); without it the
    # lowest value of a ternary or binary schema does.
    values = models.JSONField(default=list)
    # Names of the error-taxonomy tags an annotator may attach to a label (multi-select).
    error_tags = models.JSONField(default=list, blank=True)
    ask_rationale = models.BooleanField(default=False)
    first_error_mode = models.BooleanField(default=False)
    # Which steps the schema asks about: {"kinds": [...], "roles": [...], "agents": [...]},
    # each condition left out or empty meaning any; a step must meet all that are given.
    applies_to = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["project", "name", "version"], name="labelschema_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"

    def clean(self) -> None:
        # The admin's form calls this; the schema page and services check the same rule.
        problem = schema_values_key_error(self.values)
        if problem is not None:
            raise ValidationError({"values": problem})
        problem = applies_to_error(self.applies_to)
        if problem is not None:
            raise ValidationError({"applies_to": problem})

    def applies(self, kind: str, role: str, agent: str) -> bool:
        """Whether the schema asks about a step of this kind, role and agent."""
        given = self.applies_to if isinstance(self.applies_to, dict) else {}
        for key, have in (("kinds", kind), ("roles", role), ("agents", agent)):
            wanted = given.get(key) or []
            if wanted and have not in wanted:
                return False
        return True

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The values as dicts with a safe colour, in schema order. Kept on the instance
        while ``values`` is the same object: the labeling page reads each schema's
        entries once per step."""
        kept = self.__dict__.get("_entries")
        if kept is not None and kept[0] is self.values and kept[1] == self.kind:
            return list(kept[2])
        error_value = self.error_value
        entries = []
        for entry in self.values or []:
            if not isinstance(entry, dict) or not isinstance(entry.get("value"), int):
                continue
            color = str(entry.get("color", ""))
            entries.append(
                {
                    "value": entry["value"],
                    "name": str(entry.get("name") or entry["value"]),
                    "key": str(entry.get("key") or ""),
                    "color": color if _HEX_COLOR.fullmatch(color) else _FALLBACK_COLOR,
                    "error": entry["value"] == error_value,
                }
            )
        self.__dict__["_entries"] = (self.values, self.kind, entries)
        return list(entries)

    @property
    def allowed_values(self) -> set[int]:
        return {e["value"] for e in self.values or [] if isinstance(e, dict) and "value" in e}

    @property
    def error_value(self) -> int | None:
        """The value that marks a step as wrong (first-error mode, corrections), if any."""
        flagged = [e["value"] for e in self.values or [] if isinstance(e, dict) and e.get("error")]
        if flagged:
            return int(flagged[0])
        if self.kind in (self.Kind.TERNARY, self.Kind.BINARY) and self.allowed_values:
            return min(self.allowed_values)
        return None

    def entry_for(self, value: int | None) -> dict[str, Any] | None:
        for entry in self.entries:
            if entry["value"] == value:
                return entry
        return None


class StepLabel(models.Model):
    """One annotator's label on one step under one schema version. Of an annotator's
    submitted labels on a step under the versions of one schema, only the newest counts:
    the older ones are ``superseded`` (kept, with their history), so a schema edited
    mid-project never gives an annotator two votes on a step. Triggers keep that rule on
    every write (migration 0006): a newer version's label submitted supersedes the older,
    and taking it back (undo, deletion) makes the older one count again."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        SUBMITTED = "submitted"
        SUPERSEDED = "superseded"

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="labels")
    # Indexed with the schema (below), so "has this annotator labelled in this project" is
    # one probe per schema of the project, not a read of every label the annotator gave.
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="step_labels",
        db_index=False,
    )
    # RESTRICT: a schema with labels cannot be deleted on its own, but deleting its project
    # (which deletes the labels too) may go through.
    schema = models.ForeignKey(LabelSchema, on_delete=models.RESTRICT, related_name="labels")
    value = models.IntegerField()
    tags = models.JSONField(default=list, blank=True)
    rationale = models.TextField(blank=True)
    # On a step labelled as an error: what the step should have said (PRM800K's human
    # completion). Feeds step-level preference pairs in exports.
    correction = models.TextField(blank=True, default="", db_default="")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.SUBMITTED)
    saw_model_scores = models.BooleanField(default=False)
    time_spent_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["step", "annotator", "schema"], name="steplabel_unique_per_annotator"
            )
        ]
        indexes: ClassVar = [
            models.Index(fields=["step", "schema"], name="steplabel_step_schema"),
            models.Index(fields=["annotator", "schema"], name="steplabel_annotator_schema"),
        ]

    def __str__(self) -> str:
        return f"{self.value} on {self.step_id} by {self.annotator_id}"


StepLabelEvent: Any = pghistory.create_event_model(
    StepLabel,
    pghistory.InsertEvent(),
    # Re-posting the same label (a double click, a retried request) changes only the
    # timestamps and the time spent, and leaves no event.
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at", "time_spent_ms"])),
    pghistory.DeleteEvent(),
    model_name="StepLabelEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    level=pgtrigger.Statement,
    meta={"indexes": [models.Index(fields=["step", "annotator"], name="steplabelevent_step")]},
    abstract=False,
)


class StepMajority(models.Model):
    """The ``human:majority`` label of a step under one label schema (by name: the votes
    under every version of it count together, one per annotator as migration 0006 keeps
    them): the value with the strictly highest count among human annotators' submitted
    labels (imported labels do not vote), NULL on a tie. A row exists while the step has
    such a label under the schema; a step labelled under two schemas has two rows, and
    neither counts the other's votes.

    Statement-level triggers on ``labeling_steplabel`` (migration 0008) keep it in the
    same transaction as every label write (upserts, undo, submit, ``COPY``, the ORM), so
    a comparison over a million steps reads the majority with one index scan instead of
    aggregating every label. The triggers lock a step's rows before they recount them,
    so two annotators labelling one step at once are counted one after the other (at
    READ COMMITTED, which label writes use). Renaming a user into or out of ``import:``
    does not recount their labels.

    No foreign-key constraints: the triggers write a million rows in one statement when
    labels are copied in, and a step's labels (whose deletion removes its row) go before
    the step itself."""

    pk = models.CompositePrimaryKey("step", "schema_name")
    step = models.ForeignKey(
        Step, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # The schema's name (LabelSchema.name), not a version's id: a majority outlives an
    # edit of the schema.
    schema_name = models.CharField(max_length=100)
    project = models.ForeignKey(
        Project, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    value = models.IntegerField(null=True)

    class Meta:
        indexes: ClassVar = [
            models.Index(
                fields=["project", "schema_name", "step"],
                include=["value"],
                condition=models.Q(value__isnull=False),
                name="stepmajority_project_schema",
            )
        ]

    def __str__(self) -> str:
        return f"majority {self.value} on {self.step_id} ({self.schema_name})"


class TrajectoryLabel(models.Model):
    """One annotator's verdict on a whole trajectory, and the record of their work on it:
    a draft while they label its steps, submitted when they finish."""

    class Outcome(models.TextChoices):
        CORRECT = "correct"
        INCORRECT = "incorrect"
        UNSURE = "unsure"

    class FinishReason(models.TextChoices):
        SOLUTION = "solution"
        FOUND_ERROR = "found_error", "found error"
        GIVE_UP = "give_up", "give up"
        BAD_PROBLEM = "bad_problem", "bad problem"

    class Status(models.TextChoices):
        DRAFT = "draft"
        SUBMITTED = "submitted"

    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="verdicts")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="trajectory_labels"
    )
    outcome = models.CharField(max_length=20, choices=Outcome.choices, blank=True, db_default="")
    # The earliest step this annotator labelled as an error; kept current by the label service.
    first_error_index = models.PositiveIntegerField(null=True, blank=True)
    finish_reason = models.CharField(
        max_length=20, choices=FinishReason.choices, blank=True, db_default=""
    )
    comment = models.TextField(blank=True, db_default="")
    # The decisive failure (the Who&When task): which agent, at which step, decided that
    # the run failed, and why. ``decisive_agent`` is an agent's name as
    # ``trajectories.agents.trajectory_agents`` lists them; empty and null: not judged.
    decisive_agent = models.CharField(max_length=200, blank=True, db_default="")
    decisive_step = models.PositiveIntegerField(null=True, blank=True)
    decisive_reason = models.TextField(blank=True, db_default="")
    # "Flag this trajectory": the problem itself is bad (ambiguous, wrong ground truth).
    flagged = models.BooleanField(default=False, db_default=False)
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.DRAFT, db_default=Status.DRAFT
    )
    submitted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["trajectory", "annotator"], name="trajectorylabel_unique_per_annotator"
            )
        ]
        indexes: ClassVar = [
            models.Index(fields=["annotator", "status"], name="trajlabel_annotator_status"),
            models.Index(
                fields=["trajectory"], condition=models.Q(flagged=True), name="trajlabel_flagged"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.finish_reason or self.status} on {self.trajectory_id} by {self.annotator_id}"


TrajectoryLabelEvent: Any = pghistory.create_event_model(
    TrajectoryLabel,
    pghistory.InsertEvent(),
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at"])),
    pghistory.DeleteEvent(),
    model_name="TrajectoryLabelEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    abstract=False,
)


class FinalLabel(models.Model):
    """The adjudicated label of a step, set by a reviewer after comparing the annotators'
    labels. Its own label source (``adjudicated``), never mixed with annotators' labels."""

    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="final_labels")
    schema = models.ForeignKey(LabelSchema, on_delete=models.RESTRICT, related_name="final_labels")
    value = models.IntegerField()
    tags = models.JSONField(default=list, blank=True)
    rationale = models.TextField(blank=True)
    correction = models.TextField(blank=True)
    adjudicator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="final_labels"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["step", "schema"], name="finallabel_unique_per_step")
        ]

    def __str__(self) -> str:
        return f"final {self.value} on {self.step_id}"


FinalLabelEvent: Any = pghistory.create_event_model(
    FinalLabel,
    pghistory.InsertEvent(),
    pghistory.UpdateEvent(condition=pghistory.AnyChange(exclude=["updated_at"])),
    pghistory.DeleteEvent(),
    model_name="FinalLabelEvent",
    context_field=pghistory.ContextJSONField(),
    context_id_field=pghistory.ContextUUIDField(),
    abstract=False,
)


class Queue(models.Model):
    """What to label and by whom: a fixed selection of a project's trajectories, each to be
    labelled by ``overlap`` different annotators. "Next item" leases one item to one
    annotator for ``lease_seconds``, in the queue's ``order``."""

    class Order(models.TextChoices):
        POSITION = "position", "in order"
        # The trajectories whose unlabelled steps the latest trained head is least sure of
        # (score nearest 0.5) first: the labels that teach the head most.
        UNCERTAIN = "uncertain", "most uncertain first"

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="queues")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    overlap = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(20)]
    )
    lease_seconds = models.PositiveIntegerField(
        default=30 * 60, validators=[MinValueValidator(60), MaxValueValidator(7 * 24 * 3600)]
    )
    # Who may take items; nobody listed means every member of the project.
    assignees = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="assigned_queues"
    )
    order = models.CharField(
        max_length=10, choices=Order.choices, default=Order.POSITION, db_default=Order.POSITION
    )
    # The filters the selection was made with, for the record.
    selection = models.JSONField(default=dict, blank=True)
    # The names of the step schemas the queue asks for, in the order given; empty: every
    # active schema of the project (as before queues named theirs). Its annotators' pages
    # offer those schemas and their progress counts labels under them.
    schemas = models.JSONField(default=list, blank=True)
    # The names of the span schemas (labeling/spans.py) the queue asks for; empty: none
    # asked for (the span panel offers every active one, and progress counts none). A
    # trajectory is done for one when the annotator has a span of it or has submitted.
    span_schemas = models.JSONField(default=list, blank=True)
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["-created_at", "-id"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["project", "name"], name="queue_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class QueueItem(models.Model):
    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="items")
    trajectory = models.ForeignKey(Trajectory, on_delete=models.CASCADE, related_name="queue_items")
    position = models.PositiveIntegerField(default=0)
    # For the "most uncertain first" order: the least |score - 0.5| among the trajectory's
    # unlabelled labelable steps under the latest trained head, when this was last ranked
    # (labeling.services.queue_uncertainty_refresh); NULL (last) when none is scored.
    uncertainty = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["queue", "trajectory"], name="queueitem_unique")
        ]
        indexes: ClassVar = [
            models.Index(fields=["queue", "position", "id"], name="queueitem_order"),
            models.Index(
                fields=["queue", "uncertainty", "position", "id"], name="queueitem_uncertain"
            ),
            models.Index(fields=["trajectory"], name="queueitem_trajectory"),
        ]

    def __str__(self) -> str:
        return f"{self.trajectory_id} in {self.queue_id}"


class QueueAssignment(models.Model):
    """One annotator's hold on one queue item. A ``leased`` assignment whose ``expires_at``
    has passed no longer counts towards the item's overlap; its annotator may resume it
    while the item still has room. An item is never handed to the same annotator twice
    (unique per item and annotator)."""

    class Status(models.TextChoices):
        LEASED = "leased"
        SUBMITTED = "submitted"
        RELEASED = "released"  # skipped by the annotator
        EXPIRED = "expired"  # lease ran out and the slot went to someone else

    item = models.ForeignKey(QueueItem, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="queue_assignments"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.LEASED)
    leased_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    submitted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["item", "annotator"], name="assignment_unique")
        ]
        indexes: ClassVar = [
            models.Index(fields=["item", "status"], name="assignment_item_status"),
            models.Index(fields=["annotator", "status"], name="assignment_annotator_status"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} to {self.annotator_id} ({self.status})"


class QueueCounts(models.Model):
    """A queue's items and how many of them are complete (as many submitted assignments
    as its ``overlap``), kept by triggers on the items, the assignments and the queue
    (migration 0015) in the transaction of every write, whichever service, bulk statement,
    cascade or admin edit makes it. The queue list and the labeling page read these two
    numbers instead of counting a queue of 600,000 items on every view."""

    queue = models.OneToOneField(
        Queue, primary_key=True, on_delete=models.CASCADE, related_name="counts"
    )
    items = models.PositiveIntegerField(default=0)
    complete = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.queue_id}: {self.complete} / {self.items} complete"


class QueueAnnotatorCounts(models.Model):
    """How many of a queue's items one annotator has submitted, kept by the same triggers
    as ``QueueCounts``: "submitted by you" on the queue list and the labeling page, which
    counting an annotator's own assignments made a second for one with 100,000 of them."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="+")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+"
    )
    submitted = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["queue", "annotator"], name="queueannotatorcounts_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.annotator_id} submitted {self.submitted} in {self.queue_id}"


# --- Span labels (labeling/spans.py) ---------------------------------------------------
# Defined in their own module; imported here so that Django registers them with the app.
from labeling.spans import FinalSpan as FinalSpan  # noqa: E402
from labeling.spans import FinalSpanEvent as FinalSpanEvent  # noqa: E402
from labeling.spans import SpanLabel as SpanLabel  # noqa: E402
from labeling.spans import SpanLabelEvent as SpanLabelEvent  # noqa: E402
from labeling.spans import SpanSchema as SpanSchema  # noqa: E402
