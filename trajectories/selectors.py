"""Named read queries. Every lookup that starts from a request goes through an
``*_for_user`` helper, which raises 404 for anything outside the user's projects."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db.models import (
    Count,
    Exists,
    F,
    Func,
    IntegerField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce, Left, Length
from django.http import Http404
from django.utils import timezone

from trajectories.columns import ListColumn, list_columns_all
from trajectories.metadata_query import MetadataSyntaxError, metadata_conditions_parse
from trajectories.metadata_sql import metadata_condition_q
from trajectories.models import (
    FollowedFile,
    FollowSource,
    ImportBatch,
    Membership,
    MembershipEvent,
    MembershipInvite,
    Project,
    Step,
    Trajectory,
)
from trajectories.search import SEARCH_MAX_LENGTH, search_condition, search_probe_pays

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


@dataclass(frozen=True)
class TrajectoryFilters:
    """What the trajectory list filters on, and what a saved selection (``Selection``)
    can add. The empty value of a field filters nothing."""

    outcome: str = ""  # "success", "failure", "unknown" or "" for any
    model_name: str = ""
    task_key: str = ""
    min_steps: int | None = None
    max_steps: int | None = None
    # Submitted labels (any annotator) on the labelable steps: "unlabelled" (none),
    # "partial" (some steps) or "complete" (every labelable step).
    label_status: str = ""
    # Among steps that two or more human annotators labelled, the share where they all
    # gave the same value is at least this (0..1); trajectories with no such step are out.
    min_agreement: float | None = None
    # The human majority against ``model_scorer``'s scores thresholded at
    # ``model_threshold``, on steps where both have a non-neutral value: "agree" (all such
    # steps agree, and there is one) or "disagree" (at least one step differs).
    human_model: str = ""
    model_scorer: str = ""
    model_threshold: float = 0.5
    # "yes": some step has a submitted label of -1 (human or imported); "no": none has.
    first_error: str = ""
    # With ``credit_run`` (an attribution run's id): a step's credit is above
    # ``credit_above`` / below ``credit_below``.
    credit_run: int | None = None
    credit_above: float | None = None
    credit_below: float | None = None
    # Full-text search over the task and step text (``trajectories.search``'s syntax).
    search: str = ""
    # Some one step matches all of these that are set: its tool name, its agent, its
    # kind, and whether its metadata has an ``error`` ("yes") or none of the steps has
    # one ("no").
    tool_name: str = ""
    agent: str = ""
    step_kind: str = ""
    error_step: str = ""
    # Conditions on the trajectory's metadata, ``trajectories.metadata_query``'s syntax:
    # "metadata.level = 3, metadata.cost >= 0.5".
    metadata: str = ""
    # RL training facts (trajectories/training_filters.py, labeling/filters.py): the
    # rollout's policy version ("7", or a range "3..7" on the number it ends with), its
    # training step, some step's advantage, and "yes": some step's advantage has the
    # other sign than its human majority label.
    policy_version: str = ""
    min_training_step: int | None = None
    max_training_step: int | None = None
    min_advantage: float | None = None
    max_advantage: float | None = None
    advantage_disagrees: str = ""


FILTER_CHOICES: dict[str, tuple[str, ...]] = {
    "outcome": ("success", "failure", "unknown"),
    "label_status": ("unlabelled", "partial", "complete"),
    "human_model": ("agree", "disagree"),
    "first_error": ("yes", "no"),
    "step_kind": tuple(Step.Kind.values),
    "error_step": ("yes", "no"),
    "advantage_disagrees": ("yes",),
}
_FILTER_TYPES: dict[str, tuple[type, ...]] = {
    "outcome": (str,),
    "model_name": (str,),
    "task_key": (str,),
    "min_steps": (int,),
    "max_steps": (int,),
    "label_status": (str,),
    "min_agreement": (int, float),
    "human_model": (str,),
    "model_scorer": (str,),
    "model_threshold": (int, float),
    "first_error": (str,),
    "credit_run": (int,),
    "credit_above": (int, float),
    "credit_below": (int, float),
    "search": (str,),
    "tool_name": (str,),
    "agent": (str,),
    "step_kind": (str,),
    "error_step": (str,),
    "metadata": (str,),
    "policy_version": (str,),
    "min_training_step": (int,),
    "max_training_step": (int,),
    "min_advantage": (int, float),
    "max_advantage": (int, float),
    "advantage_disagrees": (str,),
}


def trajectory_filters_from(definition: Mapping[str, Any]) -> TrajectoryFilters:
    """Filters from a stored selection definition (JSON), checked field by field; a
    ValueError names the field and what it accepts."""
    unknown = set(definition) - set(_FILTER_TYPES)
    if unknown:
        raise ValueError(f"selection has unknown filters: {', '.join(sorted(unknown))}")
    for name, value in definition.items():
        if value is None and name not in ("model_threshold",):
            continue
        types = _FILTER_TYPES[name]
        if isinstance(value, bool) or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            raise ValueError(f"selection filter {name} is {value!r}; expected {expected}")
        if name in FILTER_CHOICES and value and value not in FILTER_CHOICES[name]:
            allowed = ", ".join(FILTER_CHOICES[name])
            raise ValueError(f"selection filter {name} is {value!r}; expected one of {allowed}")
    filters = TrajectoryFilters(**definition)
    for name in ("min_agreement", "model_threshold"):
        value = getattr(filters, name)
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"selection filter {name} is {value!r}; expected 0..1")
    if filters.human_model and not filters.model_scorer:
        raise ValueError("selection filter human_model needs model_scorer")
    has_bound = filters.credit_above is not None or filters.credit_below is not None
    if has_bound and filters.credit_run is None:
        raise ValueError("selection filters credit_above / credit_below need credit_run")
    if len(filters.search) > SEARCH_MAX_LENGTH:
        raise ValueError(f"selection filter search is longer than {SEARCH_MAX_LENGTH} characters")
    try:
        metadata_conditions_parse(filters.metadata)
    except MetadataSyntaxError as error:
        raise ValueError(f"selection filter metadata: {error}") from None
    # The module registers its conditions on this one, so it is imported late.
    from trajectories.training_filters import policy_version_parse

    try:
        policy_version_parse(filters.policy_version)
    except ValueError as error:
        raise ValueError(f"selection filter policy_version: {error}") from None
    return filters


def trajectory_filters_definition(filters: TrajectoryFilters) -> dict[str, Any]:
    """The fields that filter something, as a selection stores them."""
    default = TrajectoryFilters()
    return {
        name: value
        for name, value in dataclasses.asdict(filters).items()
        if value != getattr(default, name)
    }


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
    if filters.model_name:
        queryset = queryset.filter(model_name=filters.model_name)
    if filters.task_key:
        queryset = queryset.filter(task_key=filters.task_key)
    if filters.min_steps is not None:
        queryset = queryset.filter(step_count__gte=filters.min_steps)
    if filters.max_steps is not None:
        queryset = queryset.filter(step_count__lte=filters.max_steps)
    for metadata_condition in metadata_conditions_parse(filters.metadata):
        queryset = queryset.filter(metadata_condition_q(metadata_condition))
    step_condition = _step_condition(filters)
    if step_condition is not None:
        queryset = queryset.filter(
            Exists(Step.objects.filter(step_condition, trajectory=OuterRef("pk")))
        )
    if filters.error_step == "no":
        errors = Step.objects.filter(trajectory=OuterRef("pk"), metadata__has_key="error")
        queryset = queryset.filter(~Exists(errors))
    if filters.search.strip():
        queryset = queryset.filter(search_condition(project, filters.search, probe=search_probe))
    for condition in _FILTER_CONDITIONS.values():
        narrowed = condition(project, filters)
        if narrowed is not None:
            queryset = queryset.filter(narrowed)
    return queryset


def _step_condition(filters: TrajectoryFilters) -> Q | None:
    """What one step must match, or None when no step filter is set."""
    fields: dict[str, Any] = {}
    if filters.tool_name:
        fields["tool_name"] = filters.tool_name
    if filters.agent:
        fields["agent"] = filters.agent
    if filters.step_kind:
        fields["kind"] = filters.step_kind
    if filters.error_step == "yes":
        fields["metadata__has_key"] = "error"
    return Q(**fields) if fields else None


def trajectory_list_page(
    project: Project,
    filters: TrajectoryFilters,
    *,
    after: int | None = None,
    size: int = TRAJECTORY_PAGE_SIZE,
    columns: Sequence[ListColumn] | None = None,
) -> tuple[list[Trajectory], int | None]:
    """One page of the trajectory list, newest first, and the cursor for the next page
    (``None`` on the last page). Keyset pagination on id: the cost of a page does not grow
    with how deep it is. Rows carry ``task_preview`` and ``list_cells`` (a (column, text)
    pair per column); the task text itself, metadata and the raw
    source are not loaded. ``columns`` defaults to every registered column."""
    probe = bool(filters.search.strip()) and search_probe_pays(filters.search, size)
    queryset = trajectories_filtered(project, filters, search_probe=probe)
    if after is not None:
        queryset = queryset.filter(id__lt=after)
    if columns is None:
        columns = list_columns_all()
    annotations: dict[str, Any] = {}
    for column in columns:
        annotations.update(column.annotations(project))
    rows: list[Trajectory] = list(
        queryset.only(
            "id",
            "external_id",
            "task_key",
            "model_name",
            "step_count",
            "success",
            "outcome_reward",
            "parent_id",
            "branch_index",
        )
        .annotate(
            task_preview=Left("task", TASK_PREVIEW_CHARS), task_length=Length("task"), **annotations
        )
        .order_by("-id")[: size + 1]
    )
    for row in rows:
        row.list_cells = [(column, column.cell(row)) for column in columns]  # type: ignore[attr-defined]
    if len(rows) > size:
        return rows[:size], rows[size - 1].pk
    return rows, None


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


def model_names_for_project(project: Project, limit: int = 100) -> list[str]:
    return list(
        Trajectory.objects.filter(project=project)
        .exclude(model_name="")
        .order_by("model_name")
        .values_list("model_name", flat=True)
        .distinct()[:limit]
    )


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
