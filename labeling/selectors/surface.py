"""Named read queries for labeling. Lookups that start from a request go through a
``*_for_user`` helper, which raises 404 for anything outside the user's projects.

The labeling surface is the page annotators live in, so what it needs about one trajectory
and one user (role, active schema, their verdict, their lease, their progress, the queue's
progress) comes back from a single query: :func:`labeling_state_for_user`. The steps and
their labels are two more, whatever the trajectory's length.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.contrib.postgres.aggregates import ArrayAgg
from django.db import models
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet, Subquery, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Left, Length
from django.http import Http404
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
    projects_for_user,
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


def _from_json(model: type[ModelT], data: dict[str, Any] | None) -> ModelT | None:
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


_T = '"trajectories_trajectory"'
# The project's first schema (the first made of those with an active version): the one
# the progress counts and first-error mode follow.
_ACTIVE_SCHEMA_ID = f"""(SELECT s.id FROM labeling_labelschema s
    WHERE s.project_id = {_T}."project_id" AND s.is_active
    ORDER BY (SELECT min(o.id) FROM labeling_labelschema o
              WHERE o.project_id = s.project_id AND o.name = s.name), s.version DESC, s.id DESC
    LIMIT 1)"""
_SQL_ROLE = f"""SELECT m.role FROM trajectories_membership m
    WHERE m.project_id = {_T}."project_id" AND m.user_id = %s"""
# Every active schema, the first made first (the newest version of each name is the
# active one).
_SQL_SCHEMAS = f"""SELECT json_agg(row_to_json(s) ORDER BY (
        SELECT min(o.id) FROM labeling_labelschema o
        WHERE o.project_id = s.project_id AND o.name = s.name), s.id)
    FROM labeling_labelschema s WHERE s.project_id = {_T}."project_id" AND s.is_active"""
_SQL_VERDICT = f"""SELECT row_to_json(tl) FROM labeling_trajectorylabel tl
    WHERE tl.trajectory_id = {_T}."id" AND tl.annotator_id = %s"""
_SQL_LEASE = f"""SELECT json_build_object('assignment_id', a.id, 'status', a.status,
        'expires_at', a.expires_at, 'item_id', i.id, 'queue_id', q.id, 'queue_name', q.name,
        'overlap', q.overlap, 'schemas', q.schemas, 'span_schemas', q.span_schemas)
    FROM labeling_queueassignment a
    JOIN labeling_queueitem i ON i.id = a.item_id
    JOIN labeling_queue q ON q.id = i.queue_id
    WHERE i.trajectory_id = {_T}."id" AND a.annotator_id = %s
      AND a.status IN ('leased', 'submitted')
    ORDER BY (q.id = %s::bigint) DESC NULLS LAST, (a.status = 'leased') DESC, a.leased_at DESC
    LIMIT 1"""
# This user's progress on the active schema; the "to first error" counts stop at the first
# step they labelled as an error (first-error mode asks for nothing after it).
_SQL_PROGRESS = f"""SELECT json_build_object(
        'labelable', count(*), 'labelled', count(l.id),
        'labelable_to_first_error', count(*) FILTER (WHERE s.index <= fe.i),
        'labelled_to_first_error', count(l.id) FILTER (WHERE s.index <= fe.i))
    FROM trajectories_step s
    LEFT JOIN labeling_steplabel l
      ON l.step_id = s.id AND l.annotator_id = %s AND l.schema_id = {_ACTIVE_SCHEMA_ID}
    LEFT JOIN (SELECT tl.first_error_index AS i FROM labeling_trajectorylabel tl
               WHERE tl.trajectory_id = {_T}."id" AND tl.annotator_id = %s) fe ON true
    WHERE s.trajectory_id = {_T}."id" AND s.labelable"""
QUEUE_PROGRESS_SQL = """SELECT json_build_object(
        'items', count(*),
        'complete', count(*) FILTER (WHERE done.n >= q.overlap),
        'mine', count(*) FILTER (WHERE done.mine))
    FROM labeling_queueitem i
    JOIN labeling_queue q ON q.id = i.queue_id
    LEFT JOIN LATERAL (
        SELECT count(*) AS n, bool_or(a.annotator_id = %s) AS mine
        FROM labeling_queueassignment a WHERE a.item_id = i.id AND a.status = 'submitted'
    ) done ON true
    WHERE i.queue_id = %s"""


# Yes/no facts of the trajectory's project that a higher app wants on the labeling page
# (rollouts: whether the project has a policy to roll out with), read in the state's one
# query: name → an SQL condition over the trajectory row's ``project_id``, given the
# quoted column, with its parameters. The SQL lives in the app that registers it.
StateFlag = tuple[str, list[Any]]
_STATE_FLAGS: dict[str, Callable[[str], StateFlag]] = {}


def labeling_state_flag_register(name: str, condition: Callable[[str], StateFlag]) -> None:
    _STATE_FLAGS[name] = condition


def labeling_state_for_user(
    user: AnyUser, trajectory_pk: int, *, queue_id: int | None = None
) -> LabelingState:
    """The labeling state of one trajectory for ``user``, in one query; 404 for a
    trajectory outside the user's projects. ``queue_id`` (queue mode) picks the lease in
    that queue and adds the queue's progress."""
    if not user.is_authenticated:
        raise Http404("No such trajectory.")
    uid = int(user.pk)
    queryset = (
        Trajectory.objects.select_related("project")
        .filter(pk=trajectory_pk, project__in=projects_for_user(user))
        .annotate(
            _role=RawSQL(_SQL_ROLE, [uid]),
            _schemas=RawSQL(_SQL_SCHEMAS, []),
            _verdict=RawSQL(_SQL_VERDICT, [uid]),
            _lease=RawSQL(_SQL_LEASE, [uid, queue_id]),
            _progress=RawSQL(_SQL_PROGRESS, [uid, uid]),
        )
    )
    for name, condition in _STATE_FLAGS.items():
        sql, params = condition(f'{_T}."project_id"')
        queryset = queryset.annotate(**{f"_flag_{name}": RawSQL(sql, params)})
    if queue_id is not None:
        queryset = queryset.annotate(
            _queue_progress=RawSQL(
                f'SELECT CASE WHEN q.project_id = {_T}."project_id" THEN ({QUEUE_PROGRESS_SQL})'
                " END FROM labeling_queue q WHERE q.id = %s",
                [uid, queue_id, queue_id],
            )
        )
    trajectory = queryset.first()
    if trajectory is None:
        raise Http404("No such trajectory.")
    state = _state_from_row(trajectory, uid)
    if state.lease is not None and state.lease.schemas:
        _count_queue_schemas(state)
    return state


def _count_queue_schemas(state: LabelingState) -> None:
    """Progress under a queue that names its schemas: one to label per labelable step
    and schema of the queue that applies to it, and this user's labels under them (in
    first-error mode, those up to their first error). One query."""
    wanted = {schema.pk: schema for schema in state.schemas}
    rows = (
        Step.objects.filter(trajectory_id=state.trajectory.pk, labelable=True)
        .annotate(
            _mine=ArrayAgg(
                "labels__schema_id",
                filter=Q(labels__annotator_id=state.user_id, labels__schema_id__in=list(wanted)),
                default=Value([]),
            )
        )
        .values_list("index", "kind", "role", "agent", "_mine")
    )
    first_error = state.first_error_index
    counts = {"labelable": 0, "labelled": 0, "to_first": 0, "labelled_to_first": 0}
    for index, kind, role, agent, mine in rows:
        for schema in wanted.values():
            if not schema.applies(kind, role, agent):
                continue
            done = schema.pk in (mine or [])
            counts["labelable"] += 1
            counts["labelled"] += done
            if first_error is not None and index <= first_error:
                counts["to_first"] += 1
                counts["labelled_to_first"] += done
    state.labelable = counts["labelable"]
    state.labelled = counts["labelled"]
    state.labelable_to_first_error = counts["to_first"]
    state.labelled_to_first_error = counts["labelled_to_first"]


def _state_from_row(trajectory: Trajectory, user_id: int) -> LabelingState:
    row: Any = trajectory
    lease = None
    if row._lease:
        data = dict(row._lease)
        data["expires_at"] = dt.datetime.fromisoformat(data["expires_at"])
        lease = Lease(**data)
    progress = row._progress or {}
    queue_progress = getattr(row, "_queue_progress", None)
    schemas = [
        schema
        for schema in (_from_json(LabelSchema, data) for data in row._schemas or [])
        if schema is not None
    ]
    if lease is not None and lease.schemas:
        # The queue asks for some schemas only: those, in the queue's order.
        by_name = {schema.name: schema for schema in schemas}
        schemas = [by_name[name] for name in lease.schemas if name in by_name]
    return LabelingState(
        trajectory=trajectory,
        user_id=user_id,
        role=row._role,
        schema=schemas[0] if schemas else None,
        schemas=schemas,
        verdict=_from_json(TrajectoryLabel, row._verdict),
        lease=lease,
        labelable=progress.get("labelable", 0),
        labelled=progress.get("labelled", 0),
        labelable_to_first_error=progress.get("labelable_to_first_error", 0),
        labelled_to_first_error=progress.get("labelled_to_first_error", 0),
        queue_progress=QueueProgress(**queue_progress) if queue_progress else None,
        settings=LabelingSettings.of(trajectory.project),
        flags={name: bool(getattr(row, f"_flag_{name}", False)) for name in _STATE_FLAGS},
    )


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
