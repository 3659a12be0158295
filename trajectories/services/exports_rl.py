"""The ``rl`` export written as Parquet, column by column (see
:mod:`trajectories.batches.columnar`).

The step rows come out of PostgreSQL in one ``COPY ... TO STDOUT (FORMAT csv)`` in the
export's order, with the reward already mapped and non-finite floats nulled, and are
parsed into Arrow tables; the verl prompts are built from each task's leading steps, a
chunk of trajectories at a time, after the steps. Everything is read in the export's
one snapshot, like every other format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from django.db import connection

from labeling.sources import label_source_sql
from trajectories.batches import ExportResult, ExportTrajectory, TaskGroup, task_groups
from trajectories.batches.columnar import STEP_CSV, PlannedGroup, csv_tables, write_rl_parquet
from trajectories.batches.labels import Neutral
from trajectories.batches.splits import parse_split_spec
from trajectories.models import Project
from trajectories.services.exports import (
    ExportRequest,
    scorer_id_for,
    trajectories_from_rows,
)

# The group key as trajectories.batches.inputs.task_group_key computes it (the task key,
# or for a trajectory without one a hash of its task text).
GROUP_KEY_SQL = (
    "CASE WHEN t.task_key <> '' THEN t.task_key"
    " ELSE 'task-' || left(encode(sha256(convert_to(t.task, 'UTF8')), 'hex'), 16) END"
)
_NEUTRAL_REWARD = {
    Neutral.POSITIVE: "1.0",
    Neutral.NEGATIVE: "-1.0",
    Neutral.DROP: "NULL",
    Neutral.KEEP: "0.0",
}
# Trajectories whose leading steps are read per query for the verl prompts.
PROMPT_CHUNK = 500


def rl_parquet_supported(format_name: str, container: str) -> bool:
    return format_name == "rl" and container in ("", "parquet")


def rl_parquet_write(
    project: Project,
    request: ExportRequest,
    *,
    order: list[int],
    out_dir: Path,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write the ``rl`` export of the trajectories ``order`` (ids in export order) into
    ``out_dir``. Runs inside the export's transaction."""
    splits = parse_split_spec(request.split) if request.split else None
    groups = _planned_groups(order, request)
    split_names = splits.names if splits is not None else ("train",)
    return write_rl_parquet(
        groups,
        _step_tables(project, request, groups, split_names),
        _prompt_groups(groups, request),
        options=request.options,
        out_dir=out_dir,
        splits=splits,
        seed=request.seed,
        progress=progress,
    )


def _planned_groups(order: list[int], request: ExportRequest) -> list[PlannedGroup]:
    """The task groups of the export with their splits, as ``task_groups`` forms them
    (it checks that each task's rollouts come together), from each trajectory's id,
    external id and group key alone."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT t.id, t.external_id, {GROUP_KEY_SQL}"
            " FROM unnest(%s::bigint[]) WITH ORDINALITY AS o(id, position)"
            " JOIN trajectories_trajectory t ON t.id = o.id ORDER BY o.position",
            [order],
        )
        rows = cursor.fetchall()
    stubs = (
        ExportTrajectory(id=pk, external_id=external_id, task="", task_key=key, steps=())
        for pk, external_id, key in rows
    )
    return [
        PlannedGroup(
            key=group.key,
            split=group.split,
            index=group.index,
            trajectory_offset=group.trajectory_offset,
            trajectory_ids=[trajectory.id for trajectory in group.trajectories],
        )
        for group in task_groups(
            stubs,
            splits=parse_split_spec(request.split) if request.split else None,
            seed=request.seed,
            whole_tasks=True,
        )
    ]


def _step_tables(
    project: Project,
    request: ExportRequest,
    groups: Sequence[PlannedGroup],
    split_names: Sequence[str],
) -> Iterator[pa.Table]:
    """Every step of ``groups`` in order, as tables of ``STEP_CSV``'s columns. A
    generator, so the COPY is over (and the connection free) once it is exhausted."""
    ids: list[int] = []
    split_of: list[int] = []
    keys: list[str] = []
    for group in groups:
        position = split_names.index(group.split)
        for trajectory_id in group.trajectory_ids:
            ids.append(trajectory_id)
            split_of.append(position)
            keys.append(group.key)
    sql, params = _rl_steps_sql(project, request)
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        # Floats as their shortest exact text, whatever the server's default.
        cursor.execute("SET LOCAL extra_float_digits = 1")
        # COPY takes no bind parameters; psycopg merges them into the statement.
        arguments = [*params[0], ids, split_of, keys, *params[1]]
        with cursor.copy(f"COPY ({sql}) TO STDOUT (FORMAT csv)", arguments) as copy:
            last: tuple[int, int] | None = None
            for table in csv_tables(copy, STEP_CSV):
                last = _check_one_row_per_step(table, last, request)
                yield table


def _check_one_row_per_step(
    table: pa.Table, last: tuple[int, int] | None, request: ExportRequest
) -> tuple[int, int] | None:
    """A label source that gives a step two labels (two label schemas) would repeat its
    row; refuse it, as the other formats do. Returns the table's last (trajectory, index)."""
    if not table.num_rows:
        return last
    trajectories = table.column("trajectory_id").to_numpy()
    indexes = table.column("step_index").to_numpy()
    repeated = bool(
        ((trajectories[1:] == trajectories[:-1]) & (indexes[1:] == indexes[:-1])).any()
    ) or (last == (int(trajectories[0]), int(indexes[0])))
    if repeated:
        raise ValueError(
            f"label source {request.labels} gives some step more than one label;"
            " name one schema's labels"
        )
    return int(trajectories[-1]), int(indexes[-1])


def _finite(expression: str) -> str:
    """``expression``, or NULL where it is NaN or infinite (PostgreSQL counts NaN equal
    to itself). The expression is written once, so its parameters are bound once."""
    return (
        f"NULLIF(NULLIF(NULLIF({expression}, 'NaN'::float8), 'Infinity'::float8),"
        " '-Infinity'::float8)"
    )


def _rl_steps_sql(
    project: Project, request: ExportRequest
) -> tuple[str, tuple[list[object], list[object]]]:
    """The columns of ``STEP_CSV`` for the steps of the trajectories given as three
    arrays (ids in order, split positions, group keys), and the parameters that go
    before and after those arrays. The labels and credits are joined in the same query
    (hash joins, one pass): cheaper here than the indexed table the chunked reads use."""
    before: list[object] = []
    if request.options.step_reward == "score":
        reward = "NULL::float8"
        if request.scorer:
            reward = _finite(
                "(SELECT sc.value FROM scoring_stepscore sc"
                " WHERE sc.step_id = s.id AND sc.scorer_id = %s)"
            )
            before.append(scorer_id_for(project, request.scorer))
    else:
        neutral = _NEUTRAL_REWARD[request.options.neutral]
        reward = (
            "CASE v.value WHEN 1 THEN 1.0::float8 WHEN -1 THEN -1.0::float8"
            f" WHEN 0 THEN {neutral}::float8 END"
        )
    # Labels and credits are joined on the steps as they are, one hash join each (the
    # label rows of other projects never match, so the source need not scope them).
    labels_sql, after = label_source_sql(project, request.labels, scoped=False)
    credits = "NULL::float8"
    if request.credit_run is not None:
        credits = "c.value"
        after = [*after, request.credit_run]
    sql = (
        "SELECT o.split, s.trajectory_id, t.external_id, o.task_key, s.index, s.role, s.kind,"
        f" s.labelable, s.content, {reward}, {_finite(credits)},"
        f" {_finite('t.outcome_reward')}, t.success, v.value,"
        " CASE WHEN s.kind = 'tool_call' AND s.tool_name <> ''"
        "  THEN json_build_array(s.tool_name, s.tool_args)::text ELSE '' END"
        " FROM unnest(%s::bigint[], %s::int[], %s::text[])"
        "  WITH ORDINALITY AS o(id, split, task_key, position)"
        " JOIN trajectories_trajectory t ON t.id = o.id"
        " JOIN trajectories_step s ON s.trajectory_id = o.id"
        f" LEFT JOIN ({labels_sql}) v ON v.step_id = s.id"
        + (
            " LEFT JOIN scoring_stepcredit c ON c.step_id = s.id AND c.run_id = %s"
            if request.credit_run is not None
            else ""
        )
        + " ORDER BY o.position, s.index"
    )
    return sql, (before, list(after))


def _prompt_groups(groups: Sequence[PlannedGroup], request: ExportRequest) -> Iterator[TaskGroup]:
    """The groups as TaskGroups for the verl prompt builder: the trajectories it reads
    (each group's first, or all of them with prompts per trajectory), each with the steps
    before its first labelable step."""
    per_task = request.options.prompts_per == "task"
    for first in range(0, len(groups), PROMPT_CHUNK):
        chunk = groups[first : first + PROMPT_CHUNK]
        wanted = [
            trajectory_id
            for group in chunk
            for trajectory_id in (group.trajectory_ids[:1] if per_task else group.trajectory_ids)
        ]
        loaded = {trajectory.id: trajectory for trajectory in _leading_steps(wanted)}
        for group in chunk:
            chosen = group.trajectory_ids[:1] if per_task else group.trajectory_ids
            yield TaskGroup(
                key=group.key,
                split=group.split,
                index=group.index,
                trajectory_offset=group.trajectory_offset,
                trajectories=[loaded[trajectory_id] for trajectory_id in chosen],
            )


def _leading_steps(ids: list[int]) -> Iterator[ExportTrajectory]:
    """The trajectories ``ids`` with only their steps before the first labelable one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, external_id, task, task_key, ground_truth, model_name,"
            " outcome_reward, success, metadata, source_format"
            " FROM trajectories_trajectory WHERE id = ANY(%s)",
            [ids],
        )
        heads = {row[0]: row for row in cursor.fetchall()}
        cursor.execute(
            "SELECT s.trajectory_id, s.index, s.kind, s.role, s.agent, s.content, s.tool_name,"
            " s.tool_args, s.metadata, s.labelable, '', NULL, NULL, NULL, NULL, NULL"
            " FROM unnest(%s::bigint[]) AS o(id)"
            " CROSS JOIN LATERAL (SELECT min(f.index) AS first FROM trajectories_step f"
            "  WHERE f.trajectory_id = o.id AND f.labelable) lead"
            " JOIN trajectories_step s ON s.trajectory_id = o.id"
            "  AND (lead.first IS NULL OR s.index < lead.first)"
            " ORDER BY s.trajectory_id, s.index",
            [ids],
        )
        rows = cursor.fetchall()
    yield from trajectories_from_rows(ids, heads, rows, lossless=False)
