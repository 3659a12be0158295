"""The ``rl`` step rows built column by column (no Django).

An ``rl`` export is one row per step, and most of its columns are database columns as
they are. Building a Python dict per step (:func:`exports.writers.rl.rl_step_rows`)
made the export several times slower than reading the same columns with ``COPY``; here
PostgreSQL hands the rows over as CSV, pyarrow parses them into columns, and Python
touches only what SQL cannot do as Python does: the text of tool-call steps
(:func:`exports.writers.text.step_text`) and the counts of the manifest, taken over
whole columns.

The files are the same bytes as :func:`exports.writers.export.write_export` writes
from the same trajectories (a test holds the two paths to it): the same rows, cut into
the same row groups by :meth:`ParquetRecordWriter.write_table`. The rows must arrive with
the columns of :data:`STEP_CSV`, in the export's order, the reward mapped and the
non-finite floats nulled (the Django side's SQL does that); ``split`` is the position of
the row's split in the export's split names, ``label`` the resolved label before the
neutral mapping, and ``tool_call`` is ``[tool_name, tool_args]`` as JSON for a
``tool_call`` step with a tool name and empty for every other step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from exports.writers import schemas
from exports.writers.export import (
    ExportFiles,
    ExportResult,
    check_export,
    export_format,
    label_key,
)
from exports.writers.inputs import ExportOptions, ExportStep, TaskGroup
from exports.writers.labels import LABEL_VALUES, Neutral, map_label
from exports.writers.output import (
    DEFAULT_ROW_GROUP_SIZE,
    ParquetRecordWriter,
)
from exports.writers.rl import verl_prompt_records
from exports.writers.splits import SplitSpec
from exports.writers.text import step_text

STEP_CSV = pa.schema(
    [
        ("split", pa.int32()),
        *schemas.RL_STEPS,
        ("label", pa.int64()),
        ("tool_call", pa.string()),
    ]
)
# COPY rows are gathered into pieces of about this size, each parsed in one call.
BLOCK_BYTES = 4 << 20


def csv_tables(
    rows: Iterable[bytes | memoryview], schema: pa.Schema, *, block_bytes: int | None = None
) -> Iterator[pa.Table]:
    """The rows of a ``COPY ... TO STDOUT (FORMAT csv)`` (one message a row, as the
    driver hands them over) as tables of ``schema``'s columns, a few megabytes each.

    Every piece holds whole rows and is parsed as one block, so a value with newlines,
    or a row larger than any block, parses like any other. Each row is copied out of
    the driver's buffer at once: holding on to a million of its memoryviews until
    their piece is joined made reading a third slower. (A reading thread of its own
    gained nothing: the rows are read in Python, under the GIL, either way.)
    """
    limit = BLOCK_BYTES if block_bytes is None else block_bytes
    pieces: list[bytes] = []
    size = 0
    for row in rows:
        pieces.append(bytes(row))
        size += len(row)
        if size >= limit:
            yield _parse_csv(b"".join(pieces), schema)
            pieces, size = [], 0
    if pieces:
        yield _parse_csv(b"".join(pieces), schema)


def _parse_csv(data: bytes, schema: pa.Schema) -> pa.Table:
    return pcsv.read_csv(
        pa.py_buffer(data),
        # One block: pyarrow refuses a row that straddles two.
        read_options=pcsv.ReadOptions(
            column_names=schema.names, block_size=len(data) + 1, use_threads=False
        ),
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        # PostgreSQL writes NULL as an empty field and an empty string as "": the text
        # columns are never NULL, so an empty one is the empty string.
        convert_options=pcsv.ConvertOptions(
            column_types=schema,
            strings_can_be_null=False,
            true_values=["t"],
            false_values=["f"],
        ),
    )


def with_step_text(table: pa.Table) -> pa.Table:
    """``table`` with the text of its tool-call steps written as ``step_text`` writes
    it (content, then the call); the other steps' text is their content already."""
    calls = table.column("tool_call")
    positions = np.flatnonzero(pc.not_equal(calls, "").to_numpy(zero_copy_only=False))
    if not len(positions):
        return table
    texts = table.column("step_text").to_pylist()
    kinds, roles = table.column("kind"), table.column("role")
    labelable = table.column("labelable")
    for position in positions.tolist():
        tool_name, tool_args = json.loads(calls[position].as_py())
        step = ExportStep(
            index=0,
            kind=kinds[position].as_py(),
            role=roles[position].as_py(),
            content=texts[position],
            labelable=labelable[position].as_py(),
            prefix_hash="",
            tool_name=tool_name,
            tool_args=tool_args,
        )
        texts[position] = step_text(step)
    column = table.schema.get_field_index("step_text")
    return table.set_column(column, "step_text", pa.array(texts, pa.string()))


@dataclass(frozen=True)
class PlannedGroup:
    """A task group of the export as planned before its steps are read: its key, split,
    numbering (as in :class:`TaskGroup`) and trajectory ids in order."""

    key: str
    split: str
    index: int
    trajectory_offset: int
    trajectory_ids: Sequence[int]


def count_groups(result: ExportResult, groups: Sequence[PlannedGroup]) -> None:
    """Tasks and trajectories, in all and per split, as ``write_export`` counts them."""
    for group in groups:
        sizes = result.split_sizes[group.split]
        sizes["tasks"] += 1
        sizes["trajectories"] += len(group.trajectory_ids)
    result.counts["tasks"] = len(groups)
    result.counts["trajectories"] = sum(len(group.trajectory_ids) for group in groups)


def write_rl_parquet(
    groups: Sequence[PlannedGroup],
    step_tables: Iterable[pa.Table],
    prompt_groups: Iterable[TaskGroup],
    *,
    options: ExportOptions,
    out_dir: Path,
    splits: SplitSpec | None = None,
    seed: int = 0,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write an ``rl`` export as Parquet: the step rows from ``step_tables`` (columns of
    :data:`STEP_CSV`, every step of ``groups`` in order) and the verl prompts built from
    ``prompt_groups`` (the same groups as TaskGroups whose trajectories hold the steps
    before their first labelable one). Same files and counts as ``write_export``.
    ``progress`` is told how many trajectories each table finished.
    """
    export = export_format("rl")
    check_export(export, options, "parquet", False)
    files = ExportFiles(
        export,
        options,
        out_dir,
        "parquet",
        splits=splits,
        seed=seed,
        row_group_size=row_group_size,
    )
    result = files.result
    count_groups(result, groups)
    with files:
        try:
            _write_steps(step_tables, files, result, progress)
        finally:
            # A generator that failed half way is closed now, so that the database
            # connection under it (a COPY) is free before the caller's transaction ends.
            close = getattr(step_tables, "close", None)
            if close is not None:
                close()
        for prompt_group in prompt_groups:
            writer = files.writers["rl-prompts", prompt_group.split]
            for record in verl_prompt_records(prompt_group, options, result.notes):
                writer.write(record)
                result.split_sizes[prompt_group.split]["records:rl-prompts"] += 1
                result.counts["records:rl-prompts"] += 1
    return result


def _write_steps(
    tables: Iterable[pa.Table],
    files: ExportFiles,
    result: ExportResult,
    progress: Callable[[int], None] | None,
) -> None:
    neutral = result.options.neutral
    split_names = files.split_names
    last_trajectory: int | None = None
    for table in tables:
        if not table.num_rows:
            continue
        table = with_step_text(table)
        _count(table, split_names, result, neutral)
        split_column = table.column("split")
        for position, split in enumerate(split_names):
            rows = table
            if len(split_names) > 1:
                rows = table.filter(pc.equal(split_column, position))
            if rows.num_rows:
                writer = files.writers["rl", split]
                assert isinstance(writer, ParquetRecordWriter)
                writer.write_table(rows)
        if progress is not None:
            trajectories = table.column("trajectory_id")
            finished = pc.count_distinct(trajectories).as_py()
            last = trajectories[-1].as_py()
            # The table's last trajectory may go on in the next table; count it there.
            first = trajectories[0].as_py()
            finished -= 1 if first == last_trajectory else 0
            last_trajectory = last
            progress(finished)


def _count(
    table: pa.Table, split_names: Sequence[str], result: ExportResult, neutral: Neutral
) -> None:
    """Steps per split, and the resolved labels of the labelable steps before and after
    the neutral mapping, as ``write_export`` counts them: each (split, labelable, label)
    is one code, and the codes are counted with one bincount."""
    labels = table.column("label")
    values = pc.unique(labels.drop_null()).to_pylist()
    for value in values:
        if value not in LABEL_VALUES:
            raise ValueError(f"label {value!r} is not one of -1, 0, 1")
    # Labels -1, 0, 1 become 0, 1, 2 and no label 3.
    label_codes = pc.fill_null(pc.add(labels, 1), 3).to_numpy(zero_copy_only=False)
    labelable = table.column("labelable").to_numpy(zero_copy_only=False).astype(np.int64)
    splits = table.column("split").to_numpy(zero_copy_only=False).astype(np.int64)
    counts = np.bincount(splits * 8 + labelable * 4 + label_codes, minlength=8 * len(split_names))
    for code in np.flatnonzero(counts).tolist():
        count = int(counts[code])
        sizes = result.split_sizes[split_names[code // 8]]
        sizes["steps"] += count
        sizes["records:rl"] += count
        result.counts["steps"] += count
        result.counts["records:rl"] += count
        if not code & 4:
            continue
        label = None if code % 4 == 3 else code % 4 - 1
        result.counts["labelable_steps"] += count
        result.labels[label_key(label)] += count
        result.mapped_labels[label_key(map_label(label, neutral))] += count
