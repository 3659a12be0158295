"""Named read queries. Every lookup that starts from a request goes through an
``*_for_user`` helper, which raises 404 for anything outside the user's projects."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    FloatField,
    Func,
    IntegerField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Left, Length
from django.http import Http404
from django.utils import timezone

from trajectories.columns import ListColumn, list_columns_all
from trajectories.metadata_query import metadata_conditions_parse
from trajectories.metadata_sql import metadata_condition_q
from trajectories.models import (
    FollowedFile,
    FollowSource,
    ImportBatch,
    LiveTrace,
    Membership,
    MembershipEvent,
    MembershipInvite,
    Project,
    Step,
    Trajectory,
)
from trajectories.search import search_condition, search_probe_pays
from trajectories.selection import FILTERS, TrajectoryFilters

AnyUser = User | AbstractBaseUser | AnonymousUser


def projects_for_user(user: AnyUser) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    # A project being deleted is gone for everyone at once; a worker removes its rows.
    return Project.objects.filter(memberships__user_id=user.pk, deleting_since__isnull=True)


def membership_role(user: AnyUser, project: Project) -> str | None:
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(user_id=user.pk, project=project)
        .values_list("role", flat=True)
        .first()
    )


def project_get_for_user(user: AnyUser, slug: str) -> Project:
    project = projects_for_user(user).filter(slug=slug).first()
    if project is None:
        raise Http404("No such project.")
    return project


def project_members(project: Project) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    )


def membership_events_recent(project: Project, limit: int = 200) -> QuerySet[MembershipEvent]:
    """The project's latest member changes, newest first."""
    return MembershipEvent.objects.filter(project=project).select_related("actor")[:limit]


def invites_pending(project: Project) -> QuerySet[MembershipInvite]:
    """The project's invite links that can still be used, newest first."""
    return MembershipInvite.objects.filter(
        project=project, used_at__isnull=True, expires_at__gt=timezone.now()
    ).select_related("created_by")


def trajectory_get_for_user(user: AnyUser, pk: int) -> Trajectory:
    trajectory = (
        Trajectory.objects.select_related("project")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if trajectory is None:
        raise Http404("No such trajectory.")
    return trajectory


def step_get_for_user(user: AnyUser, pk: int) -> Step:
    step = (
        Step.objects.select_related("trajectory__project")
        .filter(pk=pk, trajectory__project__in=projects_for_user(user))
        .first()
    )
    if step is None:
        raise Http404("No such step.")
    return step


# The texts of a trajectory its page shows in part (a long one freezes the tab when laid
# out whole) and loads in full on demand.
TRAJECTORY_TEXT_FIELDS = ("task", "ground_truth", "metadata")


def trajectory_text_full(trajectory: Trajectory, field: str) -> str:
    """The whole text of one of ``TRAJECTORY_TEXT_FIELDS``; metadata as indented JSON."""
    if field == "metadata":
        if not trajectory.metadata:
            return ""
        return json.dumps(trajectory.metadata, indent=2, ensure_ascii=False, default=str)
    return str(getattr(trajectory, field) or "")


# --- Browse pages -------------------------------------------------------------------------

# Steps longer than this show a preview on the trajectory page and load the rest on demand,
# so a page of long tool outputs stays small.
STEP_PREVIEW_CHARS = 2000
TRAJECTORY_PAGE_SIZE = 50
# Trajectory list rows show the start of the task only; the full text is never loaded there.
TASK_PREVIEW_CHARS = 160
RECENT_IMPORT_BATCHES = 5


def project_list_for_user(user: AnyUser) -> QuerySet[Project]:
    """The user's projects, each annotated with ``role`` and ``trajectory_count``."""
    if not user.is_authenticated:
        return Project.objects.none()
    role = Membership.objects.filter(project=OuterRef("pk"), user_id=user.pk).values("role")[:1]
    trajectory_count = (
        Trajectory.objects.filter(project=OuterRef("pk"))
        .order_by()
        .values("project")
        .annotate(n=Count("id"))
        .values("n")
    )
    return (
        projects_for_user(user)
        .annotate(
            role=Subquery(role),
            trajectory_count=Coalesce(Subquery(trajectory_count), 0),
        )
        .order_by("name")
    )


@dataclass(frozen=True)
class ProjectStats:
    trajectories: int
    successes: int
    failures: int
    unknown_outcome: int
    steps: int
    labelable_steps: int


def project_stats(project: Project) -> ProjectStats:
    outcomes = Trajectory.objects.filter(project=project).aggregate(
        total=Count("id"),
        successes=Count("id", filter=Q(success=True)),
        failures=Count("id", filter=Q(success=False)),
        unknown=Count("id", filter=Q(success__isnull=True)),
    )
    steps = Step.objects.filter(trajectory__project=project).aggregate(
        total=Count("id"),
        labelable=Count("id", filter=Q(labelable=True)),
    )
    return ProjectStats(
        trajectories=outcomes["total"],
        successes=outcomes["successes"],
        failures=outcomes["failures"],
        unknown_outcome=outcomes["unknown"],
        steps=steps["total"],
        labelable_steps=steps["labelable"],
    )


def import_batches_recent(
    project: Project, limit: int = RECENT_IMPORT_BATCHES
) -> list[ImportBatch]:
    """The latest import batches with ``error_count`` and the first few errors
    (``first_errors``); a batch's full error list can be long, so it is not loaded.
    Batches an app's own job wrote (rollout continuations) are not people's imports."""
    return list(
        ImportBatch.objects.filter(project=project, internal=False)
        .defer("errors")
        .annotate(
            error_count=Func(
                F("errors"), function="jsonb_array_length", output_field=IntegerField()
            ),
            first_errors=Func(
                F("errors"),
                function="jsonb_path_query_array",
                template="%(function)s(%(expressions)s, '$[0 to 2]')",
                output_field=JSONField(),
            ),
        )
        .order_by("-created_at", "-id")[:limit]
    )


_OUTCOME_FILTERS = {
    "success": Q(success=True),
    "failure": Q(success=False),
    "unknown": Q(success__isnull=True),
}


# The filters on labels and credits are conditions the apps that own those tables add
# (labeling and scoring, from their AppConfig.ready()), so this app names none of them.
# A condition gets the project and the filters, and gives what to narrow the trajectories
# by, or None when its fields filter nothing.
FilterCondition = Callable[[Project, TrajectoryFilters], Q | None]
_FILTER_CONDITIONS: dict[str, FilterCondition] = {}


def trajectory_filter_register(name: str) -> Callable[[FilterCondition], FilterCondition]:
    """Decorate a condition to have ``trajectories_filtered`` apply it, after the
    trajectory's own fields, in the order the apps register (the order of
    INSTALLED_APPS). Registering a name again replaces its condition."""

    def register(condition: FilterCondition) -> FilterCondition:
        _FILTER_CONDITIONS[name] = condition
        return condition

    return register


def trajectories_filtered(
    project: Project, filters: TrajectoryFilters, *, search_probe: bool = False
) -> QuerySet[Trajectory]:
    """The project's trajectories that pass ``filters``. ``search_probe``: test the
    search per trajectory (``trajectories.search.search_condition``), for a first page
    of a common word; a count or a whole selection keeps the default."""
    queryset = Trajectory.objects.filter(project=project)
    if filters.outcome in _OUTCOME_FILTERS:
        queryset = queryset.filter(_OUTCOME_FILTERS[filters.outcome])
    if filters.origin:
        continued = Exists(
            ImportBatch.objects.filter(pk=OuterRef("import_batch_id"), internal=True)
        )
        queryset = queryset.filter(continued if filters.origin == "rollouts" else ~continued)
    for spec in FILTERS.values():
        value = getattr(filters, spec.name)
        if value in ("", None):
            continue
        if spec.column:
            queryset = queryset.filter(**_text_or_prefix(f"{spec.column}__{spec.lookup}", value))
        elif spec.step_column:
            steps = Step.objects.filter(
                trajectory=OuterRef("pk"), **{f"{spec.step_column}__{spec.lookup}": value}
            )
            queryset = queryset.filter(Exists(steps))
    for metadata_condition in metadata_conditions_parse(filters.meta):
        queryset = queryset.filter(metadata_condition_q(metadata_condition))
    step_condition = _step_condition(filters)
    if step_condition is not None:
        queryset = queryset.filter(
            Exists(Step.objects.filter(step_condition, trajectory=OuterRef("pk")))
        )
    if filters.error_steps == "no":
        errors = Step.objects.filter(trajectory=OuterRef("pk"), metadata__has_key="error")
        queryset = queryset.filter(~Exists(errors))
    if filters.q.strip():
        queryset = queryset.filter(search_condition(project, filters.q, probe=search_probe))
    for condition in _FILTER_CONDITIONS.values():
        narrowed = condition(project, filters)
        if narrowed is not None:
            queryset = queryset.filter(narrowed)
    return queryset


def selection_check(project: Project, filters: TrajectoryFilters) -> None:
    """Raise SelectionError, naming the filter, when ``filters`` names something
    ``project`` lacks (a scorer, an attribution run): what a job checks before it is
    queued. Building the query runs every condition; nothing is read."""
    trajectories_filtered(project, filters)


def _text_or_prefix(lookup: str, value: Any) -> dict[str, Any]:
    """An exact name, or with a trailing ``*`` (``model=gpt-4o*``) the names that start
    with the rest."""
    if lookup.endswith("__exact") and isinstance(value, str) and value.endswith("*"):
        return {lookup.removesuffix("__exact") + "__startswith": value[:-1]}
    return {lookup: value}


def _step_condition(filters: TrajectoryFilters) -> Q | None:
    """What one step must match, or None when no step filter is set."""
    fields: dict[str, Any] = {}
    if filters.tool:
        fields.update(_text_or_prefix("tool_name__exact", filters.tool))
    if filters.agent:
        fields.update(_text_or_prefix("agent__exact", filters.agent))
    if filters.kind:
        fields["kind"] = filters.kind
    if filters.error_steps == "yes":
        fields["metadata__has_key"] = "error"
    return Q(**fields) if fields else None


# The list's own columns, each with what it sorts by; registered columns sort by their
# ``ListColumn.sort`` annotation. ``?ordering=steps`` sorts ascending, ``-steps`` descending.
LIST_SORTS: dict[str, str] = {
    "external_id": "external_id",
    "task": "task_key",
    "model": "model_name",
    "steps": "step_count",
    "outcome": "success",
    "reward": "outcome_reward",
    "id": "id",
}
# Newest first: the order of a list with no ``ordering``.
DEFAULT_ORDERING = "-id"


@dataclass(frozen=True)
class ListOrdering:
    name: str  # a key of LIST_SORTS or a column's name
    descending: bool
    field: str  # what the query orders by (a field or a column's annotation)

    @property
    def text(self) -> str:
        return f"-{self.name}" if self.descending else self.name


def list_ordering_parse(text: str, columns: Sequence[ListColumn]) -> ListOrdering:
    """``name`` or ``-name`` of a sortable column among ``columns`` (the ones the member
    sees) or the list's own; ValueError names the sorts there are."""
    text = (text or DEFAULT_ORDERING).strip()
    name = text.removeprefix("-")
    sorts = {**LIST_SORTS, **{c.name: c.sort for c in columns if c.sort}}
    if name not in sorts:
        raise ValueError(f"cannot sort by {name!r}; sort by {', '.join(sorts)} (- for descending)")
    return ListOrdering(name=name, descending=text.startswith("-"), field=sorts[name])


# The trajectory's own columns that are never empty: sorted plainly, so the pkey and the
# (project, ...) indexes serve the order (``NULLS LAST`` on ``id`` made every first page
# of the list sort the whole project: 0.2 s at 58,000 trajectories).
_NEVER_EMPTY = frozenset(f.name for f in Trajectory._meta.concrete_fields if not f.null)


def _ordered(queryset: QuerySet[Trajectory], ordering: ListOrdering) -> QuerySet[Trajectory]:
    """Sorted, empty values last either way, ties by id in the same direction."""
    if ordering.field in _NEVER_EMPTY:
        sign = "-" if ordering.descending else ""
        return queryset.order_by(*dict.fromkeys((f"{sign}{ordering.field}", f"{sign}id")))
    if ordering.descending:
        return queryset.order_by(F(ordering.field).desc(nulls_last=True), "-id")
    return queryset.order_by(F(ordering.field).asc(nulls_last=True), "id")


# The list's sorts on text; every other sort is on a number (or success as 1 and 0).
_TEXT_SORTS = frozenset({"external_id", "task_key", "model_name"})


def list_sort_key(ordering: ListOrdering) -> Any:
    """What a cursor pages by: the sorted value with no NULLs (an empty value is +inf
    ascending and -inf descending, so it comes last either way, as on the page).
    A column's sort needs its annotations on the query."""
    if ordering.field in _TEXT_SORTS:
        return F(ordering.field)
    if ordering.field == "success":
        value: Any = Case(
            When(success=True, then=Value(1.0)),
            When(success=False, then=Value(0.0)),
            output_field=FloatField(),
        )
    else:
        value = Cast(F(ordering.field), FloatField())
    empty = float("-inf") if ordering.descending else float("inf")
    return Coalesce(value, Value(empty, output_field=FloatField()))


def trajectory_list_page(
    project: Project,
    filters: TrajectoryFilters,
    *,
    after: int | None = None,
    offset: int = 0,
    ordering: ListOrdering | None = None,
    size: int = TRAJECTORY_PAGE_SIZE,
    columns: Sequence[ListColumn] | None = None,
) -> tuple[list[Trajectory], int | None]:
    """One page of the trajectory list and the cursor for the next page (``None`` on the
    last page). Newest first by default, with keyset pagination on id (``after``): the
    cost of a page does not grow with how deep it is. Sorted by another column, pages go
    by ``offset`` and the cursor is the next page's offset. Rows carry ``task_preview``
    and ``list_cells`` (a (column, text) pair per column); the task text itself, metadata
    and the raw source are not loaded. ``columns`` defaults to every registered column."""
    if columns is None:
        columns = list_columns_all()
    if ordering is None:
        ordering = list_ordering_parse(DEFAULT_ORDERING, columns)
    by_id = ordering.text == DEFAULT_ORDERING
    probe = by_id and bool(filters.q.strip()) and search_probe_pays(filters.q, size)
    queryset = trajectories_filtered(project, filters, search_probe=probe)
    if by_id and after is not None:
        queryset = queryset.filter(id__lt=after)
    annotations: dict[str, Any] = {}
    for column in columns:
        annotations.update(column.annotations(project))
    queryset = queryset.only(
        "id",
        "external_id",
        "task_key",
        "model_name",
        "step_count",
        "success",
        "outcome_reward",
        "parent_id",
        "branch_index",
    ).annotate(
        task_preview=Left("task", TASK_PREVIEW_CHARS), task_length=Length("task"), **annotations
    )
    start = 0 if by_id else offset
    rows: list[Trajectory] = list(_ordered(queryset, ordering)[start : start + size + 1])
    for row in rows:
        row.list_cells = [(column, column.cell(row)) for column in columns]  # type: ignore[attr-defined]
    if len(rows) <= size:
        return rows, None
    return rows[:size], (rows[size - 1].pk if by_id else start + size)


# Files shown per followed folder on the project page, the latest changed first.
FOLLOWED_FILES_SHOWN = 10


def follow_sources_for_project(project: Project) -> list[FollowSource]:
    """The folders followed into the project, each with ``file_count``, ``trajectories``
    (imported from them), ``failed_count`` and ``recent_files`` (the latest changed
    first), in two queries."""
    sources: list[FollowSource] = list(
        FollowSource.objects.filter(project=project).annotate(
            file_count=Count("files"),
            imported_trajectories=Sum("files__trajectories"),
            failed_count=Count("files", filter=~Q(files__error="")),
        )
    )
    if not sources:
        return sources
    recent: dict[int, list[FollowedFile]] = {source.pk: [] for source in sources}
    for row in FollowedFile.objects.filter(source__in=sources).order_by("-updated_at", "-id"):
        if len(recent[row.source_id]) < FOLLOWED_FILES_SHOWN:
            recent[row.source_id].append(row)
    for source in sources:
        source.recent_files = recent[source.pk]  # type: ignore[attr-defined]
    return sources


def project_has_continuations(project: Project) -> bool:
    """Whether a rollout job wrote continuations into the project (the list hides them
    unless asked)."""
    return ImportBatch.objects.filter(project=project, internal=True).exists()


# The next name after the last, one probe of the (project, model_name) index each: a
# DISTINCT read every trajectory of the project (60 ms at 58,000 for three names).
_MODEL_NAMES_SQL = """
WITH RECURSIVE names(name) AS (
    (SELECT model_name FROM trajectories_trajectory
     WHERE project_id = %(project)s AND model_name > '' ORDER BY model_name LIMIT 1)
    UNION ALL
    SELECT (SELECT t.model_name FROM trajectories_trajectory t
            WHERE t.project_id = %(project)s AND t.model_name > names.name
            ORDER BY t.model_name LIMIT 1)
    FROM names WHERE names.name IS NOT NULL
)
SELECT name FROM names WHERE name IS NOT NULL LIMIT %(limit)s
"""


def model_names_for_project(project: Project, limit: int = 100) -> list[str]:
    """The project's model names in order, the first ``limit`` (the list's choices)."""
    with connection.cursor() as cursor:
        cursor.execute(_MODEL_NAMES_SQL, {"project": project.pk, "limit": limit})
        return [name for (name,) in cursor.fetchall()]


def import_batch_get_for_user(user: AnyUser, pk: int) -> ImportBatch:
    batch = (
        ImportBatch.objects.select_related("project", "created_by")
        .filter(pk=pk, project__in=projects_for_user(user))
        .first()
    )
    if batch is None:
        raise Http404("No such import.")
    return batch


# Researchers and admins import, score and export; annotators label.
MANAGING_ROLES = frozenset({Membership.Role.RESEARCHER, Membership.Role.ADMIN})


def can_manage_data(user: AnyUser, project: Project) -> bool:
    return membership_role(user, project) in MANAGING_ROLES


def can_download_exports(user: AnyUser, project: Project) -> bool:
    return role_downloads_exports(membership_role(user, project), project)


def projects_hiding_exports(user: AnyUser) -> frozenset[int]:
    """The ids of the user's projects whose exports (files and manifests) the user may
    not read, in one query."""
    if not user.is_authenticated:
        return frozenset()
    memberships = Membership.objects.filter(user_id=user.pk).select_related("project")
    return frozenset(
        m.project_id for m in memberships if not role_downloads_exports(m.role, m.project)
    )


def role_downloads_exports(role: str | None, project: Project) -> bool:
    """Export files carry everyone's labels and the model's scores: in a project that
    hides those from annotators (blind labeling, hidden scores), only researchers and
    admins may read them."""
    settings = project.settings or {}
    hidden = bool(settings.get("blind_labeling") or settings.get("hide_model_scores"))
    return role in MANAGING_ROLES or (not hidden and role is not None)


# --- A task's rollouts as a prefix tree ---------------------------------------------------

TREE_MAX_ROLLOUTS = 500
TREE_PREVIEW_CHARS = 160


@dataclass
class TreeStep:
    pk: int
    index: int
    role: str
    kind: str
    tool_name: str
    preview: str


@dataclass
class TaskRollouts:
    trajectories: list[Trajectory]  # with a known outcome, in id order
    hashes: list[list[str]]
    steps: list[list[TreeStep]]
    outcomes: list[float]
    unknown_outcome: int  # rollouts left out: their outcome is unknown
    truncated: bool  # more than TREE_MAX_ROLLOUTS rollouts; the first ones are shown


def task_rollouts(project: Project, task_key: str) -> TaskRollouts:
    """Rollouts of one task with their steps' prefix hashes and outcomes (success as 1/0,
    else a reward within [0, 1])."""
    candidates = list(
        Trajectory.objects.filter(project=project, task_key=task_key)
        .only("id", "external_id", "success", "outcome_reward", "step_count")
        .order_by("id")[: TREE_MAX_ROLLOUTS + 1]
    )
    truncated = len(candidates) > TREE_MAX_ROLLOUTS
    kept: list[Trajectory] = []
    outcomes: list[float] = []
    for trajectory in candidates[:TREE_MAX_ROLLOUTS]:
        if trajectory.success is not None:
            outcomes.append(1.0 if trajectory.success else 0.0)
        elif trajectory.outcome_reward is not None and 0.0 <= trajectory.outcome_reward <= 1.0:
            outcomes.append(trajectory.outcome_reward)
        else:
            continue
        kept.append(trajectory)
    by_trajectory: dict[int, list[tuple[str, TreeStep]]] = {t.pk: [] for t in kept}
    rows = (
        Step.objects.filter(trajectory_id__in=list(by_trajectory))
        .annotate(preview=Left("content", TREE_PREVIEW_CHARS))
        .values_list(
            "trajectory_id",
            "pk",
            "index",
            "role",
            "kind",
            "tool_name",
            "preview",
            "prefix_hash",
        )
        .order_by("trajectory_id", "index")
    )
    for trajectory_id, pk, index, role, kind, tool_name, preview, prefix_hash in rows:
        by_trajectory[trajectory_id].append(
            (prefix_hash, TreeStep(pk, index, role, kind, tool_name, preview))
        )
    return TaskRollouts(
        trajectories=kept,
        hashes=[[h for h, _ in by_trajectory[t.pk]] for t in kept],
        steps=[[s for _, s in by_trajectory[t.pk]] for t in kept],
        outcomes=outcomes,
        unknown_outcome=len(candidates[:TREE_MAX_ROLLOUTS]) - len(kept),
        truncated=truncated,
    )


def live_trace_state(trajectory_id: int) -> str | None:
    """``"receiving"`` while a live trace may still grow (no root span yet, or a span
    within ``STEPSCOPE_OTLP_QUIET_SECONDS``), ``"finished"`` after, None for a trajectory
    that did not arrive live."""
    live = (
        LiveTrace.objects.filter(trajectory_id=trajectory_id)
        .only("root_seen", "last_span_at", "span_count", "assembled_count")
        .first()
    )
    if live is None:
        return None
    quiet = timezone.now() - live.last_span_at
    if (
        not live.root_seen
        or live.span_count > live.assembled_count
        or quiet.total_seconds() < django_settings.STEPSCOPE_OTLP_QUIET_SECONDS
    ):
        return "receiving"
    return "finished"
