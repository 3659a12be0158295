"""Writing an assembled live trace's steps (:mod:`trajectories.services.assembly`): appended
steps by COPY, a rebuilt trajectory's steps matched by span id and only the changed ones
rewritten, and the agent steps a new model call makes unlabelable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from django.db import connection

from trajectories import pgcopy
from trajectories.formats.base import ParsedStep

if TYPE_CHECKING:
    from trajectories.services.assembly import _Built

# Added to a trajectory's step indexes while its steps are put in their new order, so no
# two steps ever hold one index (the unique index is checked row by row).
INDEX_SHIFT = 1_000_000_000
# Step rows per statement, so a large trace's rows never make one huge query.
WRITE_ROWS = 5000


def labelable_update(cursor: Any, built: list[_Built]) -> None:
    """An agent step with a model call below it now is not labelable (``spans._step``):
    from each earlier step a new model call hangs from, up through its ancestors."""
    if not built:
        return
    pairs = [(item.trace.trajectory_id, index) for item in built for index in item.model_below]
    cursor.execute(
        "WITH RECURSIVE up AS ("
        " SELECT s.id, s.trajectory_id, (s.metadata->>'parent')::int AS parent,"
        " s.metadata->>'span_kind' AS kind, s.labelable FROM trajectories_step s"
        " JOIN unnest(%s::bigint[], %s::int[]) AS k(t, i)"
        " ON s.trajectory_id = k.t AND s.index = k.i"
        " UNION"
        " SELECT s.id, s.trajectory_id, (s.metadata->>'parent')::int,"
        " s.metadata->>'span_kind', s.labelable FROM trajectories_step s"
        " JOIN up ON s.trajectory_id = up.trajectory_id AND s.index = up.parent)"
        " UPDATE trajectories_step SET labelable = false"
        " WHERE id IN (SELECT id FROM up WHERE kind = 'agent' AND labelable)",
        [[pair[0] for pair in pairs], [pair[1] for pair in pairs]],
    )


# One step's columns as the assembler writes them (the step id aside).
StepRow = tuple[int, int, str, str, str, str, str, bool, Any, dict[str, Any], str]

# The rows go as one JSON document each (see live_spans_accept): a quarter of the
# assembler's time went to escaping text arrays element by element.
_COLUMNS = (
    "(u->>0)::bigint, (u->>1)::int, u->>2, u->>3, u->>4, u->>5, u->>6,"
    " (u->>7)::bool, (u->8)::jsonb, (u->9)::jsonb, u->>10"
)
# A span carries no RL training facts: those columns of STEP_COLUMNS are blank.
_INSERTED = (
    "(u->>0)::bigint, (u->>1)::int, u->>2, u->>3, u->>4, u->>5, u->>6,"
    " (u->>7)::bool, (u->8)::jsonb, (u->9)::jsonb,"
    " '', NULL, NULL, NULL, NULL, NULL, NULL, NULL, u->>10"
)


def _rows_of(item: _Built) -> list[StepRow]:
    """A rebuilt trajectory's rows."""
    trajectory_id = item.trace.trajectory_id
    assert trajectory_id is not None
    return [
        step_row(trajectory_id, n, prefix_hash, step)
        for n, (step, prefix_hash) in enumerate(zip(item.steps, item.hashes, strict=True))
    ]


def step_row(trajectory_id: int, index: int, prefix_hash: str, step: ParsedStep) -> StepRow:
    return (
        trajectory_id,
        index,
        prefix_hash,
        step.kind,
        step.role,
        step.agent[:100],
        step.tool_name[:200],
        step.labelable,
        step.tool_args,
        step.metadata,
        step.content,
    )


def steps_copy(built: list[_Built]) -> None:
    """The appended steps, with COPY as the importer writes steps (``pgcopy``)."""
    if not any(item.steps for item in built):
        return
    with (
        connection.cursor() as wrapper,
        wrapper.cursor.copy(f"COPY trajectories_step ({pgcopy.STEP_COLUMNS}) FROM STDIN") as copy,
    ):
        for item in built:
            trajectory_id = item.trace.trajectory_id
            assert trajectory_id is not None
            for step in item.steps:
                step.agent, step.tool_name = step.agent[:100], step.tool_name[:200]
            first = item.summary.spans - len(item.steps)
            rows = pgcopy.step_rows(item.steps, item.hashes, first).encode()
            copy.write(pgcopy.first_column_filled(rows, trajectory_id))


def steps_insert(cursor: Any, rows: list[StepRow]) -> None:
    for start in range(0, len(rows), WRITE_ROWS):
        cursor.execute(
            f"INSERT INTO trajectories_step ({pgcopy.STEP_COLUMNS})"
            f" SELECT {_INSERTED} FROM json_array_elements(%s::json) AS u",
            [orjson.dumps(rows[start : start + WRITE_ROWS]).decode()],
        )


def steps_rewrite(cursor: Any, built: list[_Built]) -> None:
    """Insert the new steps and rewrite the changed ones of each rebuilt trajectory,
    matching steps by span id. A trajectory whose steps change places first moves them
    all out of the way (``INDEX_SHIFT``), so the unique (trajectory, index) holds at
    every row."""
    grown = [item.trace.trajectory_id for item in built if item.trace.trajectory_id is not None]
    existing: dict[int, dict[str, tuple[Any, ...]]] = {}
    if grown:
        cursor.execute(
            "SELECT trajectory_id, metadata->>'span_id', id, index, prefix_hash, labelable,"
            " metadata::text"
            " FROM trajectories_step WHERE trajectory_id = ANY(%s)",
            [grown],
        )
        for trajectory_id, span_id, *step in cursor.fetchall():
            existing.setdefault(trajectory_id, {})[span_id or ""] = tuple(step)
    inserts: list[StepRow] = []
    updates: list[tuple[int, StepRow]] = []
    moved: list[int] = []
    for item in built:
        have = existing.pop(item.trace.trajectory_id or 0, {})
        rows = _rows_of(item)
        matched = [(have.get(str(step.metadata.get("span_id", ""))), step) for step in item.steps]
        shifted = any(
            before is not None and before[1] != index for index, (before, _) in enumerate(matched)
        )
        for row, (before, step) in zip(rows, matched, strict=True):
            if before is None:
                inserts.append(row)
                continue
            step_id, _, old_hash, old_labelable, old_metadata = before
            # Every step of a trajectory whose steps move is rewritten (all were moved
            # aside); otherwise only those whose place in the tree or content changed.
            if (
                shifted
                or old_hash != row[2]
                or old_labelable != step.labelable
                or orjson.loads(old_metadata) != step.metadata
            ):
                updates.append((step_id, row))
        if shifted:
            moved.append(rows[0][0])
    if moved:
        cursor.execute(
            "UPDATE trajectories_step SET index = index + %s WHERE trajectory_id = ANY(%s)",
            [INDEX_SHIFT, moved],
        )
    steps_update(cursor, updates)
    steps_insert(cursor, inserts)


def steps_update(cursor: Any, updates: list[tuple[int, StepRow]]) -> None:
    """Each step row (by id) rewritten from its new row."""
    for start in range(0, len(updates), WRITE_ROWS):
        piece = updates[start : start + WRITE_ROWS]
        cursor.execute(
            "UPDATE trajectories_step s SET index = v.index, prefix_hash = v.prefix_hash,"
            " kind = v.kind, role = v.role, agent = v.agent, tool_name = v.tool_name,"
            " labelable = v.labelable, tool_args = v.tool_args, metadata = v.metadata,"
            " content = v.content"
            f" FROM (SELECT {_COLUMNS} FROM json_array_elements(%s::json) AS u)"
            " AS v(id, index, prefix_hash, kind, role, agent, tool_name, labelable,"
            " tool_args, metadata, content) WHERE s.id = v.id",
            [orjson.dumps([[step_id, *row[1:]] for step_id, row in piece]).decode()],
        )
