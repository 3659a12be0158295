"""The project pages' reads: the project list, a project's figures, recent imports,
followed folders, its model names."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import (
    Count,
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
from django.db.models.functions import Coalesce

from trajectories.models import (
    FollowedFile,
    FollowSource,
    ImportBatch,
    Membership,
    Project,
    Step,
    Trajectory,
)
from trajectories.selectors.access import AnyUser, projects_for_user

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


def project_stats(project: Project) -> ProjectStats:
    """The project's trajectories by outcome and its steps: one pass over its trajectory
    rows (a trajectory keeps its step count), never over its steps."""
    counts = Trajectory.objects.filter(project=project).aggregate(
        total=Count("id"),
        successes=Count("id", filter=Q(success=True)),
        failures=Count("id", filter=Q(success=False)),
        unknown=Count("id", filter=Q(success__isnull=True)),
        steps=Sum("step_count"),
    )
    return ProjectStats(
        trajectories=counts["total"],
        successes=counts["successes"],
        failures=counts["failures"],
        unknown_outcome=counts["unknown"],
        steps=counts["steps"] or 0,
    )


def labelable_step_count(project: Project) -> int:
    """How many of the project's steps may be labelled: a pass over its steps (seconds
    at ten million; the project home keeps it, ``home/summary.py``)."""
    return Step.objects.filter(trajectory__project=project, labelable=True).count()


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
