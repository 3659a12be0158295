"""Where failed rollouts go wrong: a project's failed trajectories grouped by their first
error, according to a label source (humans, imported labels or a scorer at a threshold).

A rollout failed when ``success`` is false (or, without it, when its outcome reward is not
positive). Its first error is the earliest step the source labels with the schema's error
value. Groups: the step position, the part of the trajectory (quarters of its length), the
step kind and tool, and the error tags the annotators put on that step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.urls import reverse

from evaluation import compare_metrics as cm
from evaluation.compare import (
    LIST_PAGE_SIZE,
    OUTCOME_SQL,
    PREVIEW_CHARS,
    Slice,
    big_joins,
    scale_for,
    slice_sql,
    source_schema,
)
from evaluation.compare_steps import step_href
from labeling.sources import LabelSource, label_schema_scope, label_source_sql
from trajectories.models import Project, Trajectory

GROUPINGS = {
    "position": "step position",
    "part": "part of the trajectory",
    "kind": "step kind / tool",
    "tag": "error tag",
}
_TOTALS = ("labelled", "located", "tagged")
PARTS = ("first quarter", "second quarter", "third quarter", "last quarter")
NO_TAG = "(no tag)"
_POSITION = f"width_bucket(f.index, ARRAY{list(cm.POSITION_EDGES[1:])})"
_PART = "least(4 * f.index / greatest(f.step_count, 1), 3)"


@dataclass(frozen=True)
class FailureGroup:
    grouping: str
    value: str
    name: str
    trajectories: int
    share: float  # of the failed rollouts whose first error is located


@dataclass(frozen=True)
class FailureOverview:
    source: LabelSource
    failed: int  # failed rollouts (in the slice)
    labelled: int  # ... with at least one label from the source
    located: int  # ... with a step labelled as an error
    groups: dict[str, list[FailureGroup]] = field(default_factory=dict)

    @property
    def unlabelled(self) -> int:
        return self.failed - self.labelled

    @property
    def no_error(self) -> int:
        return self.labelled - self.located


def _reference(source: LabelSource, piece: Slice | None) -> LabelSource:
    if piece is not None and piece.dimension == "annotator":
        return LabelSource("human", piece.value, schema=source.schema)
    return source


def _firsts_sql(
    project: Project, source: LabelSource, piece: Slice | None
) -> tuple[str, list[Any]]:
    """``WITH labelled AS (...), firsts AS (...)``: the failed rollouts' labelled steps
    and, per rollout, its first error (``f``: trajectory_id, step_id, index, kind,
    tool_name, step_count)."""
    ref_sql, ref_params = label_source_sql(project, _reference(source, piece))
    where, where_params = slice_sql(piece)
    error = scale_for(project, schema=source_schema(project, source)).bad
    return (
        "WITH labelled AS MATERIALIZED ("
        " SELECT s.trajectory_id, s.id AS step_id, s.index, s.kind, s.tool_name, r.value,"
        " t.step_count"
        f" FROM ({ref_sql}) r JOIN trajectories_step s ON s.id = r.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        f" WHERE t.project_id = %s AND {OUTCOME_SQL} = 0{where}),"
        " firsts AS (SELECT DISTINCT ON (trajectory_id) * FROM labelled WHERE value = %s"
        " ORDER BY trajectory_id, index)",
        [*ref_params, project.pk, *where_params, error],
    )


def _tags_sql(project: Project, source: LabelSource, step: str) -> tuple[str, list[Any]]:
    """Rows (tag) of the error tags on the step whose id is the SQL expression ``step``
    when it is labelled as an error under the source's schema, by annotators or by a
    reviewer. Looked up by step (a lateral join from the first errors): read for every
    error label in the database, the tags took 0.6 s at 30k steps and grew with every
    project."""
    schema = source_schema(project, source)
    error = scale_for(project, schema=schema).bad
    ids = list(label_schema_scope(project, schema).ids)
    return (
        "SELECT tag FROM ("
        f" SELECT l.tags FROM labeling_steplabel l WHERE l.step_id = {step}"
        " AND l.status = 'submitted' AND l.value = %s AND l.schema_id = ANY(%s)"
        " UNION ALL SELECT fl.tags FROM labeling_finallabel fl"
        f" WHERE fl.step_id = {step} AND fl.value = %s AND fl.schema_id = ANY(%s)"
        ") x CROSS JOIN LATERAL jsonb_array_elements_text(x.tags) AS tag",
        [error, ids, error, ids],
    )


# The failed rollouts as a queryset: ``OUTCOME_SQL = 0`` (success false, or without it an
# outcome reward that is not positive).
FAILED = Q(success=False) | Q(success__isnull=True, outcome_reward__lte=0)


def first_errors(
    project: Project, source: LabelSource, among: QuerySet[Trajectory]
) -> list[tuple[int, int]]:
    """(trajectory id, step id) of the first error of each of ``among``'s trajectories
    that the source labels with an error: the earliest step labelled with the schema's
    error value, as the overview reads it (failed or not: ``among`` chooses). A
    ValueError names a source the project lacks."""
    ref_sql, ref_params = label_source_sql(project, source)
    among_sql, among_params = among.order_by().values("id").query.sql_with_params()
    error = scale_for(project, schema=source_schema(project, source)).bad
    with transaction.atomic():
        big_joins(project)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT ON (s.trajectory_id) s.trajectory_id, s.id"
                f" FROM ({ref_sql}) r JOIN trajectories_step s ON s.id = r.step_id"
                f" WHERE r.value = %s AND s.trajectory_id IN ({among_sql})"
                " ORDER BY s.trajectory_id, s.index",
                [*ref_params, error, *among_params],
            )
            return [(int(t), int(s)) for t, s in cursor.fetchall()]


def failure_overview(
    project: Project, source: LabelSource, *, piece: Slice | None = None
) -> FailureOverview:
    firsts, params = _firsts_sql(project, source, piece)
    tags, tag_params = _tags_sql(project, source, "f.step_id")
    trajectory_slice = piece if piece is not None and piece.dimension != "kind" else None
    failed_where, failed_params = slice_sql(trajectory_slice)
    with transaction.atomic():
        big_joins(project)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM trajectories_trajectory t"
                f" WHERE t.project_id = %s AND {OUTCOME_SQL} = 0{failed_where}",
                [project.pk, *failed_params],
            )
            (failed,) = cursor.fetchone() or (0,)
            cursor.execute(
                f"{firsts}, tagged AS (SELECT DISTINCT f.trajectory_id, g.tag FROM firsts f"
                f" CROSS JOIN LATERAL ({tags}) g)"
                " SELECT 'labelled', '', count(DISTINCT trajectory_id) FROM labelled"
                " UNION ALL SELECT 'located', '', count(*) FROM firsts"
                f" UNION ALL SELECT 'position', {_POSITION}::text, count(*) FROM firsts f"
                " GROUP BY 2"
                f" UNION ALL SELECT 'part', {_PART}::text, count(*) FROM firsts f GROUP BY 2"
                " UNION ALL SELECT 'kind', f.kind || ':' || f.tool_name, count(*) FROM firsts f"
                " GROUP BY 2"
                " UNION ALL SELECT 'tag', tag, count(*) FROM tagged GROUP BY 2"
                " UNION ALL SELECT 'tagged', '', count(DISTINCT trajectory_id) FROM tagged",
                [*params, *tag_params],
            )
            rows = cursor.fetchall()
    totals = {grouping: count for grouping, _, count in rows if grouping in _TOTALS}
    located = totals.get("located", 0)
    groups: dict[str, list[FailureGroup]] = {grouping: [] for grouping in GROUPINGS}
    for grouping, value, count in rows:
        if grouping not in GROUPINGS:
            continue
        groups[grouping].append(
            FailureGroup(grouping, value, group_name(grouping, value), count, count / located)
        )
    untagged = located - totals.get("tagged", 0)
    if untagged:
        groups["tag"].append(FailureGroup("tag", "", NO_TAG, untagged, untagged / located))
    for grouping, found in groups.items():
        if grouping in ("position", "part"):
            found.sort(key=lambda g: int(g.value))
        else:
            found.sort(key=lambda g: (-g.trajectories, g.name))
    return FailureOverview(
        source=_reference(source, piece),
        failed=failed,
        labelled=totals.get("labelled", 0),
        located=located,
        groups=groups,
    )


def group_name(grouping: str, value: str) -> str:
    """How a group reads on the page; a ValueError for a value that names no group."""
    if grouping == "position":
        names = cm.bucket_names(cm.POSITION_EDGES)
        return f"step {names[_number(value, len(names))]}"
    if grouping == "part":
        return PARTS[_number(value, len(PARTS))]
    if grouping == "kind":
        kind, _, tool = value.partition(":")
        return f"{kind} · {tool}" if tool else kind
    if grouping == "tag":
        return value or NO_TAG
    return "first error located"


def _number(value: str, count: int) -> int:
    if not value.isdigit() or int(value) >= count:
        raise ValueError(f"{value!r} is not a number from 0 to {count - 1}")
    return int(value)


@dataclass(frozen=True)
class FailureRow:
    trajectory_id: int
    external_id: str
    step_count: int
    index: int
    step_id: int
    kind: str
    tool_name: str
    preview: str

    @property
    def href(self) -> str:
        return step_href(self.trajectory_id, self.index, self.step_id)

    @property
    def trajectory_href(self) -> str:
        return reverse("trajectory-detail", args=[self.trajectory_id])

    @property
    def compare_href(self) -> str:
        """Debug this rollout side by side with a success of the same task."""
        return reverse("rollout-diff", args=[self.trajectory_id])


def failure_list_page(
    project: Project,
    source: LabelSource,
    *,
    grouping: str = "",
    value: str = "",
    piece: Slice | None = None,
    page: int = 1,
    size: int = LIST_PAGE_SIZE,
) -> tuple[list[FailureRow], bool]:
    """The failed rollouts of one group, each with its first-error step."""
    firsts, params = _firsts_sql(project, source, piece)
    group_name(grouping, value)  # a ValueError names a group that does not exist
    condition, condition_params = "TRUE", list[Any]()
    if grouping == "position":
        condition, condition_params = f"{_POSITION} = %s", [int(value)]
    elif grouping == "part":
        condition, condition_params = f"{_PART} = %s", [int(value)]
    elif grouping == "kind":
        kind, _, tool = value.partition(":")
        condition, condition_params = "f.kind = %s AND f.tool_name = %s", [kind, tool]
    elif grouping == "tag":
        tags, tag_params = _tags_sql(project, source, "f.step_id")
        exists = f"EXISTS (SELECT 1 FROM ({tags}) g"
        if value:
            condition, condition_params = f"{exists} WHERE g.tag = %s)", [*tag_params, value]
        else:
            condition, condition_params = f"NOT {exists})", tag_params
    with transaction.atomic():
        big_joins(project)
        with connection.cursor() as cursor:
            cursor.execute(
                f"{firsts} SELECT f.trajectory_id, t.external_id, f.step_count, f.index,"
                f" f.step_id, f.kind, f.tool_name, left(s.content, {PREVIEW_CHARS})"
                " FROM firsts f JOIN trajectories_step s ON s.id = f.step_id"
                " JOIN trajectories_trajectory t ON t.id = f.trajectory_id"
                f" WHERE {condition} ORDER BY f.trajectory_id LIMIT %s OFFSET %s",
                [*params, *condition_params, size + 1, (max(page, 1) - 1) * size],
            )
            fetched = cursor.fetchall()
    return [FailureRow(*row) for row in fetched[:size]], len(fetched) > size
