"""The two formats large exports are mostly made of, each read in one statement instead
of a chunk of trajectories at a time through the row builders.

- ``rl`` as Parquet: the step rows come out of PostgreSQL in one ``COPY ... TO STDOUT
  (FORMAT csv)`` in the export's order, with the reward already mapped and non-finite
  floats nulled, and are parsed into Arrow tables (:mod:`exports.writers.columnar`);
  the verl prompts are built from each task's leading steps, a chunk at a time, after.
- ``trl-stepwise`` as JSON: PostgreSQL builds each trajectory's record, window functions
  finding where it ends (:mod:`exports.writers.encoded`). Trajectories with tool
  calls among their labelable steps take the row builders, whose text for a tool call
  (``step_text``) SQL does not reproduce.

Both give the same bytes as the row builders (tests/exports/test_bulk.py),
and read in the export's one snapshot like every other format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
from django.db import connection

from exports.services.plan import ExportPlan
from exports.services.reading import (
    HEADS_SQL,
    TWO_SCHEMAS,
    ordered_ids,
    trajectories_from_rows,
)
from exports.writers import ExportResult, ExportTrajectory, TaskGroup, task_groups
from exports.writers.columnar import STEP_CSV, PlannedGroup, csv_tables, write_rl_parquet
from exports.writers.encoded import EncodedTrajectory, write_trl_stepwise_encoded
from exports.writers.labels import Neutral

# The group key as exports.writers.inputs.task_group_key computes it (the task key,
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
_NEUTRAL_GOOD = {Neutral.POSITIVE: "true", Neutral.NEGATIVE: "false", Neutral.DROP: "NULL"}
# Trajectories whose leading steps are read per query for the verl prompts.
PROMPT_CHUNK = 500
# Rows a server-side cursor fetches per round trip.
FETCH_ROWS = 2000


Progress = Callable[[int], None] | None


def bulk_export_write(
    plan: ExportPlan, *, out_dir: Path, progress: Progress = None
) -> ExportResult | None:
    """Write the export into ``out_dir`` when one of the bulk paths serves it (``BULK``,
    by format and container), else None (the caller writes it with the row builders).
    Runs inside the export's transaction."""
    write = BULK.get((plan.export.name, plan.container))
    # A judge's critiques, decisive failures and rubric results are added by the row
    # builders only.
    options = plan.request.options
    if write is None or plan.judge_id is not None or options.decisive or options.rubric:
        return None
    return write(plan, out_dir, progress)


def _rl_parquet_write(plan: ExportPlan, out_dir: Path, progress: Progress) -> ExportResult:
    order = ordered_ids(plan)
    groups = _planned_groups(order, plan)
    split_names = plan.splits.names if plan.splits is not None else ("train",)
    return write_rl_parquet(
        groups,
        _step_tables(plan, groups, split_names),
        _prompt_groups(groups, plan),
        options=plan.request.options,
        out_dir=out_dir,
        splits=plan.splits,
        seed=plan.request.seed,
        progress=progress,
    )


def _planned_groups(order: list[int], plan: ExportPlan) -> list[PlannedGroup]:
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
            splits=plan.splits,
            seed=plan.request.seed,
            whole_tasks=True,
        )
    ]


def _step_tables(
    plan: ExportPlan,
    groups: Sequence[PlannedGroup],
    split_names: Sequence[str],
) -> Iterator[pa.Table]:
    """Every step of ``groups`` in order, as tables of ``STEP_CSV``'s columns. A
    generator, so the COPY is over (and the connection free) once it is exhausted."""
    ids, split_of = _trajectory_arrays(groups, split_names)
    keys = [group.key for group in groups for _ in group.trajectory_ids]
    sql, params = _rl_steps_sql(plan)
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        # Floats as their shortest exact text, whatever the server's default.
        cursor.execute("SET LOCAL extra_float_digits = 1")
        # COPY takes no bind parameters; psycopg merges them into the statement.
        arguments = [*params[0], ids, split_of, keys, *params[1]]
        with cursor.copy(f"COPY ({sql}) TO STDOUT (FORMAT csv)", arguments) as copy:
            last: tuple[int, int] | None = None
            for table in csv_tables(copy, STEP_CSV):
                last = _check_one_row_per_step(table, last, plan)
                yield table


def _check_one_row_per_step(
    table: pa.Table, last: tuple[int, int] | None, plan: ExportPlan
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
            f"label source {plan.request.labels} gives some step more than one label{TWO_SCHEMAS}"
        )
    return int(trajectories[-1]), int(indexes[-1])


def _finite(expression: str) -> str:
    """``expression``, or NULL where it is NaN or infinite (PostgreSQL counts NaN equal
    to itself). The expression is written once, so its parameters are bound once."""
    return (
        f"NULLIF(NULLIF(NULLIF({expression}, 'NaN'::float8), 'Infinity'::float8),"
        " '-Infinity'::float8)"
    )


def _rl_steps_sql(plan: ExportPlan) -> tuple[str, tuple[list[object], list[object]]]:
    """The columns of ``STEP_CSV`` for the steps of the trajectories given as three
    arrays (ids in order, split positions, group keys), and the parameters that go
    before and after those arrays. The labels and credits are joined in the same query
    (hash joins, one pass): cheaper here than the indexed table the chunked reads use."""
    options = plan.request.options
    before: list[object] = []
    if options.step_reward == "score":
        reward = "NULL::float8"
        if plan.scorer_id is not None:
            reward = _finite(
                "(SELECT sc.value FROM scoring_stepscore sc"
                " WHERE sc.step_id = s.id AND sc.scorer_id = %s)"
            )
            before.append(plan.scorer_id)
    else:
        neutral = _NEUTRAL_REWARD[options.neutral]
        reward = (
            "CASE v.value WHEN 1 THEN 1.0::float8 WHEN -1 THEN -1.0::float8"
            f" WHEN 0 THEN {neutral}::float8 END"
        )
    # Labels and credits are joined on the steps as they are, one hash join each (the
    # label rows of other projects never match, so the source need not scope them).
    labels_sql, after = plan.labels_sql_joined
    credit_run = plan.request.credit_run
    credits = "NULL::float8"
    if credit_run is not None:
        credits = "c.value"
        after = [*after, credit_run]
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
            if credit_run is not None
            else ""
        )
        + " ORDER BY o.position, s.index"
    )
    return sql, (before, list(after))


def _prompt_groups(groups: Sequence[PlannedGroup], plan: ExportPlan) -> Iterator[TaskGroup]:
    """The groups as TaskGroups for the verl prompt builder: the trajectories it reads
    (each group's first, or all of them with prompts per trajectory), each with the steps
    before its first labelable step."""
    per_task = plan.request.options.prompts_per == "task"
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
        cursor.execute(HEADS_SQL, [ids])
        heads = {row[0]: row for row in cursor.fetchall()}
        cursor.execute(
            "SELECT s.trajectory_id, s.index, s.kind, s.role, s.agent, s.content, s.tool_name,"
            " s.tool_args, s.metadata, s.labelable, '', NULL, NULL, NULL, NULL, NULL,"
            " NULL, NULL, NULL"
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


def _has_labelable_tool_calls(order: list[int]) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM trajectories_step s"
            " WHERE s.trajectory_id = ANY(%s) AND s.labelable AND s.kind = 'tool_call'"
            " AND s.tool_name <> '')",
            [order],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _trl_stepwise_write(plan: ExportPlan, out_dir: Path, progress: Progress) -> ExportResult | None:
    order = ordered_ids(plan)
    if _has_labelable_tool_calls(order):
        return None
    groups = _planned_groups(order, plan)
    split_names = plan.splits.names if plan.splits is not None else ("train",)
    return write_trl_stepwise_encoded(
        groups,
        _encoded_trajectories(plan, groups, split_names),
        options=plan.request.options,
        out_dir=out_dir,
        container=plan.container,
        compress=plan.request.compress,
        splits=plan.splits,
        seed=plan.request.seed,
        progress=progress,
    )


def _encoded_trajectories(
    plan: ExportPlan,
    groups: Sequence[PlannedGroup],
    split_names: Sequence[str],
) -> Iterator[EncodedTrajectory]:
    """Each trajectory of ``groups``, in order, with its record built by PostgreSQL,
    read through a server-side cursor (memory stays bounded)."""
    ids, split_of = _trajectory_arrays(groups, split_names)
    sql, params = _trl_stepwise_sql(plan)
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    with raw.cursor(name="stepscope_export_trl") as cursor:
        cursor.itersize = FETCH_ROWS
        cursor.execute(sql, [ids, *params, ids, split_of])
        for split, steps, bad, neutral, good, unlabelled, cut, repeated, record in cursor:
            if repeated:
                raise ValueError(
                    f"label source {plan.request.labels} gives some step more than one label"
                    + TWO_SCHEMAS
                )
            yield EncodedTrajectory(
                split=split,
                steps=steps,
                labels=(bad, neutral, good, unlabelled),
                cut=cut,
                record=record,
            )


def _trajectory_arrays(
    groups: Sequence[PlannedGroup], split_names: Sequence[str]
) -> tuple[list[int], list[int]]:
    """The trajectory ids in export order and the position of each one's split."""
    ids: list[int] = []
    split_of: list[int] = []
    for group in groups:
        position = split_names.index(group.split)
        ids.extend(group.trajectory_ids)
        split_of.extend([position] * len(group.trajectory_ids))
    return ids, split_of


def _trl_stepwise_sql(plan: ExportPlan) -> tuple[str, list[object]]:
    """Per trajectory (parameters: the ids, the label source's, the ids in order and
    their split positions): its split, step count, labelable steps per resolved label,
    whether its record ends at an unlabelled step, whether a step came twice (two labels
    from the source), and the record's JSON text, as
    ``trl_stepwise_records`` and ``encode_json`` make them.

    A labelable step goes in when no labelable step up to it lacks a mapped label and,
    with ``stop_at_first_error``, no labelable step before it is bad; the record is cut
    at the first unlabelled labelable step that is reached that way.
    """
    labels_sql, params = plan.labels_sql_joined
    options = plan.request.options
    good = _NEUTRAL_GOOD[options.neutral]
    after_error = " AND m.bad_before = 0" if options.stop_at_first_error else ""
    kept = f"m.labelable AND m.good IS NOT NULL AND m.unlabelled_upto = 0{after_error}"
    cut = f"m.labelable AND m.good IS NULL AND m.unlabelled_upto = 1{after_error}"
    sql = (
        "WITH steps AS ("
        " SELECT s.trajectory_id, s.index, s.labelable, s.content, v.value AS label,"
        f"  CASE v.value WHEN 1 THEN true WHEN -1 THEN false WHEN 0 THEN {good} END AS good"
        " FROM trajectories_step s"
        " JOIN unnest(%s::bigint[]) AS chosen(id) ON chosen.id = s.trajectory_id"
        f" LEFT JOIN ({labels_sql}) v ON v.step_id = s.id"
        "), marked AS ("
        " SELECT steps.*,"
        "  count(*) FILTER (WHERE labelable AND good IS NULL) OVER w AS unlabelled_upto,"
        "  count(*) FILTER (WHERE labelable AND NOT good) OVER w"
        "   - CASE WHEN labelable AND NOT good THEN 1 ELSE 0 END AS bad_before"
        " FROM steps"
        " WINDOW w AS (PARTITION BY trajectory_id ORDER BY index ROWS UNBOUNDED PRECEDING)"
        ")"
        " SELECT o.split, count(*),"
        "  count(*) FILTER (WHERE m.labelable AND m.label = -1),"
        "  count(*) FILTER (WHERE m.labelable AND m.label = 0),"
        "  count(*) FILTER (WHERE m.labelable AND m.label = 1),"
        "  count(*) FILTER (WHERE m.labelable AND m.label IS NULL),"
        f"  coalesce(bool_or({cut}), false),"
        # Indexes run 0..n-1, so more rows than that are a step the source labels twice.
        "  count(*) > max(m.index) + 1,"
        "  '{\"prompt\":' || to_json(t.task)::text || ',\"completions\":['"
        f"  || string_agg(to_json(m.content)::text, ',' ORDER BY m.index) FILTER (WHERE {kept})"
        "  || '],\"labels\":['"
        "  || string_agg(CASE WHEN m.good THEN 'true' ELSE 'false' END, ',' ORDER BY m.index)"
        f"   FILTER (WHERE {kept})"
        "  || ']}'"
        " FROM unnest(%s::bigint[], %s::int[]) WITH ORDINALITY AS o(id, split, position)"
        " JOIN trajectories_trajectory t ON t.id = o.id"
        " JOIN marked m ON m.trajectory_id = o.id"
        " GROUP BY o.position, o.split, t.task"
        " ORDER BY o.position"
    )
    return sql, params


# The bulk paths, by format and container.
BULK: dict[tuple[str, str], Callable[[ExportPlan, Path, Progress], ExportResult | None]] = {
    ("rl", "parquet"): _rl_parquet_write,
    ("trl-stepwise", "jsonl"): _trl_stepwise_write,
    ("trl-stepwise", "json"): _trl_stepwise_write,
}
