"""Named read queries for labeling. Lookups that start from a request go through a
``*_for_user`` helper, which raises 404 for anything outside the user's projects.

The labeling surface is the page annotators live in, so what it needs about one trajectory
and one user (role, active schema, their verdict, their lease, their progress, the queue's
progress) comes back from a single query: :func:`~labeling.selectors.state.labeling_state_for_user`.
The steps and their labels are two more, whatever the trajectory's length.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import models
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Left, Length
from django.utils import timezone

from labeling.models import (
    FinalLabel,
    LabelSchema,
    QueueAssignment,
    StepLabel,
    StepLabelEvent,
    TrajectoryLabel,
)
from trajectories.models import Membership, Project, Step, Trajectory
from trajectories.selectors import (
    MANAGING_ROLES,
    STEP_PREVIEW_CHARS,
    membership_role,
)

AnyUser = User | AbstractBaseUser | AnonymousUser
ModelT = TypeVar("ModelT", bound=models.Model)

# Steps rendered per page of the labeling surface; the next page loads as the annotator
# scrolls (or moves past the last loaded step with the keyboard).
STEPS_PAGE_SIZE = 200
REVIEWER_ROLES = frozenset({Membership.Role.RESEARCHER, Membership.Role.ADMIN})


# --- Project labeling settings ----------------------------------------------------------


@dataclass(frozen=True)
class LabelingSettings:
    """The labeling keys of ``Project.settings``."""

    # Annotators do not see other annotators' labels until they submit the trajectory.
    blind_labeling: bool = False
    # Annotators do not see model scores until they submit the trajectory.
    hide_model_scores: bool = False
    # Default overlap for new queues: how many annotators label each trajectory.
    labels_per_step: int = 1

    @classmethod
    def of(cls, project: Project) -> LabelingSettings:
        raw = project.settings if isinstance(project.settings, dict) else {}
        try:
            labels_per_step = max(1, int(raw.get("labels_per_step", 1)))
        except (TypeError, ValueError):
            labels_per_step = 1
        return cls(
            blind_labeling=bool(raw.get("blind_labeling", False)),
            hide_model_scores=bool(raw.get("hide_model_scores", False)),
            labels_per_step=labels_per_step,
        )


def is_reviewer(role: str | None) -> bool:
    return role in REVIEWER_ROLES


def active_schema(project: Project) -> LabelSchema | None:
    return (
        LabelSchema.objects.filter(project=project, is_active=True)
        .order_by("-version", "-id")
        .first()
    )


# --- The labeling surface ---------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """The user's hold on this trajectory through a queue."""

    assignment_id: int
    status: str
    expires_at: dt.datetime
    item_id: int
    queue_id: int
    queue_name: str
    overlap: int
    # The schema names the queue asks for (``Queue.schemas``); empty: every active one.
    schemas: list[str] = field(default_factory=list)
    # The span schema names the queue asks for (``Queue.span_schemas``); empty: any.
    span_schemas: list[str] = field(default_factory=list)

    @property
    def expired(self) -> bool:
        return self.status == QueueAssignment.Status.LEASED and self.expires_at <= timezone.now()

    @property
    def submitted(self) -> bool:
        return self.status == QueueAssignment.Status.SUBMITTED


@dataclass(frozen=True)
class QueueProgress:
    items: int = 0
    complete: int = 0  # items labelled by as many annotators as the overlap asks
    mine: int = 0  # items this user has submitted

    @property
    def finished(self) -> bool:
        """Every item is labelled by as many annotators as the overlap asks: nothing is
        left to lease, to anyone."""
        return self.items > 0 and self.complete >= self.items

    @property
    def done_by_me(self) -> bool:
        """This user has submitted every item: nothing is left to lease to them."""
        return self.items > 0 and self.mine >= self.items


@dataclass
class LabelingState:
    """What the labeling surface knows about one trajectory for one user."""

    trajectory: Trajectory
    user_id: int
    role: str | None
    schema: LabelSchema | None
    verdict: TrajectoryLabel | None
    lease: Lease | None
    labelable: int
    labelled: int
    labelable_to_first_error: int
    labelled_to_first_error: int
    queue_progress: QueueProgress | None = None
    settings: LabelingSettings = field(default_factory=LabelingSettings)
    # Every active schema of the project, the first made first (``schema`` is the first:
    # progress and first-error mode follow it). A step is labelled under each that
    # applies to it (``LabelSchema.applies``).
    schemas: list[LabelSchema] = field(default_factory=list)
    # Flags other apps add to the page (``labeling_state_flag_register``), by name.
    flags: dict[str, bool] = field(default_factory=dict)

    @property
    def project(self) -> Project:
        return self.trajectory.project

    @property
    def reviewer(self) -> bool:
        return is_reviewer(self.role)

    @property
    def manages_data(self) -> bool:
        """Researchers and admins: they run the project's jobs (scoring, rollouts), so the
        page offers those actions to them and to nobody else."""
        return self.role in MANAGING_ROLES

    @property
    def submitted(self) -> bool:
        return self.verdict is not None and self.verdict.status == TrajectoryLabel.Status.SUBMITTED

    @property
    def can_label(self) -> bool:
        """Reviewers label anything in their project; annotators what a queue gave them."""
        if self.schema is None or self.role is None:
            return False
        if self.reviewer:
            return True
        return self.lease is not None

    @property
    def blind(self) -> bool:
        """Whether other annotators' labels are hidden from this user on this trajectory."""
        return self.settings.blind_labeling and not self.reviewer and not self.submitted

    @property
    def show_model_scores(self) -> bool:
        return not (self.settings.hide_model_scores and not self.reviewer and not self.submitted)

    @property
    def first_error_index(self) -> int | None:
        if self.schema is None or self.verdict is None:
            return None
        return self.verdict.first_error_index

    @property
    def stops_at_first_error(self) -> bool:
        return bool(self.schema and self.schema.first_error_mode) and (
            self.first_error_index is not None
        )

    @property
    def to_label(self) -> int:
        """Steps this user is asked to label: every labelable step, or in first-error mode
        those up to and including the first error."""
        return self.labelable_to_first_error if self.stops_at_first_error else self.labelable

    @property
    def done(self) -> int:
        return self.labelled_to_first_error if self.stops_at_first_error else self.labelled

    @property
    def complete(self) -> bool:
        return self.done >= self.to_label

    @property
    def queue_id(self) -> int | None:
        return self.lease.queue_id if self.lease else None


def from_json(model: type[ModelT], data: dict[str, Any] | None) -> ModelT | None:
    """A model instance from a row that Postgres turned into JSON (``row_to_json``)."""
    if data is None:
        return None
    values = {}
    for model_field in model._meta.concrete_fields:
        if model_field.attname in data:
            values[model_field.attname] = model_field.to_python(data[model_field.attname])
    instance = model(**values)
    instance._state.adding = False
    instance._state.db = "default"
    return instance


def visible_labels(state: LabelingState) -> QuerySet[StepLabel]:
    """The step labels this user may see on this trajectory: all of them, or in blind mode
    before they submit, only their own."""
    labels = StepLabel.objects.select_related("annotator", "schema").order_by("annotator__username")
    if state.blind:
        labels = labels.filter(annotator_id=state.user_id)
    return labels


# A step's place in its trajectory's tree of spans (the agent-trace importers write the
# parent step's index and the depth into its metadata), read without loading the rest of
# the metadata; NULL unless it is a whole number the page can use.
_TREE_NUMBER = (
    "CASE WHEN jsonb_typeof(trajectories_step.metadata -> '{key}') = 'number'"
    " THEN CASE WHEN (trajectories_step.metadata ->> '{key}')::numeric BETWEEN 0 AND 1000000000"
    " THEN (trajectories_step.metadata ->> '{key}')::numeric::int END END"
)


# The trajectories that branch from a step (children whose ``branch_index``, the first
# step they own, is the step's index; on the last step, also those that continue past the
# end), as ``[[id, external_id, success], ...]`` (at most ALTERNATIVES_SHOWN) and a count.
# A correlated lookup per step on the parent index, which holds only trajectories with a
# parent, so a page of a trajectory without children costs next to nothing.
_ALTERNATIVES_WHERE = (
    " FROM trajectories_trajectory c WHERE c.parent_id = trajectories_step.trajectory_id"
    " AND (COALESCE(c.branch_index, 0) = trajectories_step.index"
    " OR (trajectories_step.index = %s AND c.branch_index > trajectories_step.index))"
)
ALTERNATIVES_SHOWN = 8


@dataclass(frozen=True)
class LabelForm:
    """One schema's buttons on a step: the schema, this user's label under it, and
    whether it is the project's first schema (the one first-error mode follows)."""

    schema: LabelSchema
    label: StepLabel | None
    first: bool


def step_rows(
    state: LabelingState,
    *,
    start: int = 0,
    size: int = STEPS_PAGE_SIZE,
    step_ids: list[int] | None = None,
) -> tuple[list[Step], int | None]:
    """One page of the trajectory's steps from index ``start`` (or the given steps), with
    their visible labels, in two queries whatever the number of schemas. Each step carries
    ``my_label`` (this user's label on the first schema), ``label_forms`` (a
    :class:`LabelForm` per active schema that applies to the step), ``other_labels``,
    ``final_value`` (the adjudicated value, for those allowed to see it),
    ``after_first_error``, and ``tree_parent`` / ``tree_depth`` (its parent step's index
    and its depth in a tree of spans, or None), and ``alternatives`` /
    ``alternatives_count`` (the trajectories that branch from it: its rollouts'
    continuations, PRM800K's alternative completions). Returns the steps and the index
    the next page starts at (``None`` on the last page)."""
    schema_id = state.schema.pk if state.schema else None
    last = max(state.trajectory.step_count - 1, 0)
    queryset = (
        Step.objects.filter(trajectory_id=state.trajectory.pk)
        .defer("content", "metadata", "token_logprobs")
        .annotate(
            content_preview=Left("content", STEP_PREVIEW_CHARS),
            content_length=Length("content"),
            tree_parent=RawSQL(_TREE_NUMBER.format(key="parent"), []),
            tree_depth=RawSQL(_TREE_NUMBER.format(key="depth"), []),
            alternatives_count=RawSQL(f"SELECT count(*){_ALTERNATIVES_WHERE}", [last]),
            alternatives_json=RawSQL(
                "SELECT json_agg(json_build_array(a.id, a.external_id, a.success, a.b))"
                " FROM (SELECT c.id, c.external_id, c.success, COALESCE(c.branch_index, 0) AS b"
                f"{_ALTERNATIVES_WHERE} ORDER BY c.id LIMIT {ALTERNATIVES_SHOWN}) a",
                [last],
            ),
        )
        .prefetch_related(Prefetch("labels", queryset=visible_labels(state)))
        .order_by("index")
    )
    if not state.blind and schema_id is not None:
        queryset = queryset.annotate(
            final_value=Subquery(
                FinalLabel.objects.filter(step=OuterRef("pk"), schema_id=schema_id).values("value")[
                    :1
                ]
            )
        )
    steps: list[Step]
    if step_ids is not None:
        steps = list(queryset.filter(pk__in=step_ids))
        next_start = None
    else:
        steps = list(queryset.filter(index__gte=start)[: size + 1])
        next_start = steps[size].index if len(steps) > size else None
        steps = steps[:size]
    first_error = state.first_error_index
    stops = state.schema is not None and state.schema.first_error_mode
    active = {schema.pk: schema for schema in state.schemas}
    for step in steps:
        row: Any = step
        mine = {
            label.schema_id: label
            for label in step.labels.all()
            if label.annotator_id == state.user_id and label.schema_id in active
        }
        row.my_label = mine.get(schema_id) if schema_id is not None else None
        # One form per schema that asks about the step, the first schema's first.
        row.label_forms = [
            LabelForm(schema, mine.get(schema.pk), first=schema.pk == schema_id)
            for schema in state.schemas
            if schema.applies(step.kind, step.role, step.agent)
        ]
        row.other_labels = [
            label
            for label in step.labels.all()
            if label.schema_id not in mine or mine[label.schema_id] is not label
        ]
        row.after_first_error = bool(stops and first_error is not None and step.index > first_error)
        if not hasattr(row, "final_value"):
            row.final_value = None
        listed = row.alternatives_json
        row.alternatives = [
            {"pk": pk, "external_id": external_id, "success": success, "from": start}
            for pk, external_id, success, start in (
                json.loads(listed) if isinstance(listed, str) else listed or []
            )
        ]
    return steps, next_start


# --- History ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryEntry:
    at: dt.datetime
    annotator: str
    action: str  # created, changed, undone, submitted, removed
    value_name: str
    color: str
    tags: list[str]
    rationale: str
    correction: str


def step_label_history(state: LabelingState, step: Step) -> list[HistoryEntry]:
    """Every recorded change to the labels on ``step``, oldest first; in blind mode, only
    this user's own."""
    events = StepLabelEvent.objects.filter(step_id=step.pk).order_by("pgh_id")
    if state.blind:
        events = events.filter(annotator_id=state.user_id)
    rows = list(
        events.select_related("schema").values(
            "pgh_created_at",
            "pgh_label",
            "pgh_context",
            "annotator__username",
            "schema_id",
            "value",
            "tags",
            "rationale",
            "correction",
        )
    )
    schemas = LabelSchema.objects.in_bulk({r["schema_id"] for r in rows})
    entries = []
    for r in rows:
        context = r["pgh_context"] or {}
        action = {"insert": "created", "update": "changed", "delete": "removed"}[r["pgh_label"]]
        if context.get("undo_of"):
            action = "undone"
        elif context.get("action") == "submit":
            action = "submitted"
        schema = schemas.get(r["schema_id"])
        entry = schema.entry_for(r["value"]) if schema else None
        entries.append(
            HistoryEntry(
                at=r["pgh_created_at"],
                annotator=r["annotator__username"] or "?",
                action=action,
                value_name=entry["name"] if entry else str(r["value"]),
                color=entry["color"] if entry else "#6b7280",
                tags=list(r["tags"] or []),
                rationale=r["rationale"] or "",
                correction=r["correction"] or "",
            )
        )
    return entries


# --- Who sees labels and comparisons ---------------------------------------------------


def labels_visible_to(user: AnyUser) -> QuerySet[StepLabel]:
    """Step labels in the user's projects that the user may see: all of them for
    reviewers; for annotators their own, plus others' where the project is not blind or
    they have submitted the trajectory."""
    if not user.is_authenticated:
        return StepLabel.objects.none()
    reviewer_projects = Membership.objects.filter(user_id=user.pk, role__in=REVIEWER_ROLES).values(
        "project_id"
    )
    member_projects = Membership.objects.filter(user_id=user.pk).values("project_id")
    submitted = TrajectoryLabel.objects.filter(
        trajectory_id=OuterRef("step__trajectory_id"),
        annotator_id=user.pk,
        status=TrajectoryLabel.Status.SUBMITTED,
    )
    blind_project = Project.objects.filter(
        pk=OuterRef("step__trajectory__project_id"), settings__blind_labeling=True
    )
    return StepLabel.objects.filter(step__trajectory__project__in=member_projects).filter(
        Q(step__trajectory__project__in=reviewer_projects)
        | Q(annotator_id=user.pk)
        | ~Exists(blind_project)
        | Exists(submitted)
    )


def can_compare(user: AnyUser, project: Project) -> bool:
    """Researchers and admins; annotators too unless the project labels blind or hides
    model scores from them (the compare pages show both)."""
    role = membership_role(user, project)
    if is_reviewer(role):
        return True
    settings = LabelingSettings.of(project)
    return role is not None and not (settings.blind_labeling or settings.hide_model_scores)


def labelled_step_count(project: Project) -> int:
    """How many of the project's steps carry at least one label (any status)."""
    has_label = StepLabel.objects.filter(step=OuterRef("pk"))
    return Step.objects.filter(Exists(has_label), trajectory__project=project).count()
