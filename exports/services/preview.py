"""What an export would hold, before it runs: the selection's counts (trajectories, tasks,
steps, labelled steps, the label distribution, tasks per split) read from the whole
selection in SQL, and the first records of the format built by the same writers
(:func:`exports.writers.build_records`) from the same reading code as the export, on
the selection's first few tasks."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import MD5

from exports.services.plan import ExportPlan
from exports.services.reading import read_chunks, trajectories_from_rows
from exports.writers import ExportTrajectory, build_records
from exports.writers.export import DEFAULT_SPLIT, check_export
from exports.writers.splits import split_for

# The sample: the selection's first tasks, and at most this many of their trajectories.
SAMPLE_TASKS = 5
SAMPLE_TRAJECTORIES = 40
# Records shown per output.
RECORDS_SHOWN = 3
# A record's text is cut after this many characters on the page.
RECORD_CHARS = 4000

# The label values' names, as the export's manifest counts them.
LABEL_NAMES = {-1: "bad (-1)", 0: "neutral (0)", 1: "good (+1)"}


@dataclass
class ShownRecord:
    output: str
    split: str
    text: str
    cut: bool


@dataclass
class ExportPreview:
    trajectories: int
    tasks: int
    steps: int
    labelable_steps: int
    labelled_steps: int
    # Labelled labelable steps by value name, and tasks and trajectories per split.
    labels: dict[str, int]
    splits: dict[str, tuple[int, int]]
    # The sample the records come from, and what the writers made of it.
    sample_tasks: int
    sample_trajectories: int
    sample_records: dict[str, int]
    notes: dict[str, int]
    records: list[ShownRecord] = field(default_factory=list)


def export_preview(plan: ExportPlan) -> ExportPreview:
    """The preview of ``plan``'s export; ValueError says what the export would refuse."""
    request = plan.request
    export = plan.export
    check_export(export, request.options, plan.container, request.compress)
    splits = plan.splits
    chosen = plan.chosen
    ids_sql, ids_params = chosen.values("id").query.sql_with_params()
    with transaction.atomic():
        keys = _task_keys(ids_sql, ids_params)
        per_split: dict[str, tuple[int, int]] = {}
        for key, count in keys:
            split = DEFAULT_SPLIT if splits is None else split_for(key, splits, request.seed)
            tasks, members = per_split.get(split, (0, 0))
            per_split[split] = (tasks + 1, members + count)
        steps, labelable = _step_counts(ids_sql, ids_params)
        labels = _label_counts(plan, ids_sql, ids_params)
        sample = _sample_ids(chosen)
        tally: Counter[str] = Counter()
        made: Counter[str] = Counter()
        shown: list[ShownRecord] = []
        trajectories = list(_sample_trajectories(plan, sample))
        for output, split, record in build_records(
            request.format,
            trajectories,
            request.options,
            splits=splits,
            seed=request.seed,
            tally=tally,
        ):
            made[output] += 1
            if made[output] <= RECORDS_SHOWN:
                text = json.dumps(record, indent=2, ensure_ascii=False, default=str)
                shown.append(
                    ShownRecord(output, split, text[:RECORD_CHARS], len(text) > RECORD_CHARS)
                )
    return ExportPreview(
        trajectories=sum(count for _, count in keys),
        tasks=len(keys),
        steps=steps,
        labelable_steps=labelable,
        labelled_steps=sum(labels.values()),
        labels={LABEL_NAMES.get(value, str(value)): n for value, n in sorted(labels.items())},
        splits=dict(sorted(per_split.items())),
        sample_tasks=len({t.group_key for t in trajectories}),
        sample_trajectories=len(trajectories),
        sample_records={output.name: made[output.name] for output in export.outputs},
        notes={name.replace("_", " "): n for name, n in sorted(tally.items())},
        records=shown,
    )


# A trajectory's group key (exports.writers.inputs.task_group_key) in SQL: the task key, or
# "task-" and the first 16 hex digits of the task text's SHA-256.
GROUP_KEY_SQL = (
    "CASE WHEN t.task_key <> '' THEN t.task_key"
    " ELSE 'task-' || left(encode(sha256(convert_to(t.task, 'UTF8')), 'hex'), 16) END"
)


def _task_keys(ids_sql: str, ids_params: tuple[Any, ...]) -> list[tuple[str, int]]:
    """Each task of the selection (its group key) with its number of trajectories."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {GROUP_KEY_SQL} AS key, count(*) FROM trajectories_trajectory t"
            f" WHERE t.id IN ({ids_sql}) GROUP BY key ORDER BY key",
            ids_params,
        )
        return [(key, int(count)) for key, count in cursor.fetchall()]


def _step_counts(ids_sql: str, ids_params: tuple[Any, ...]) -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE s.labelable) FROM trajectories_step s"
            f" WHERE s.trajectory_id IN ({ids_sql})",
            ids_params,
        )
        steps, labelable = cursor.fetchone()
    return int(steps), int(labelable)


def _label_counts(plan: ExportPlan, ids_sql: str, ids_params: tuple[Any, ...]) -> dict[int, int]:
    """The label source's values on the selection's labelable steps, counted. The source
    is read unscoped: the selection's steps keep other projects' labels out, and a second
    walk of the project's trajectories, estimated at one row for a project the
    statistics have not seen yet (new in a large table), was joined with the first
    row by row: 12 s for 2,000 trajectories (``bench/after_import.py``)."""
    labels_sql, labels_params = plan.labels_sql_joined
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT l.value, count(*) FROM ({labels_sql}) l"
            " JOIN trajectories_step s ON s.id = l.step_id"
            f" WHERE s.labelable AND s.trajectory_id IN ({ids_sql}) GROUP BY l.value",
            [*labels_params, *ids_params],
        )
        return {int(value): int(count) for value, count in cursor.fetchall()}


def _sample_ids(chosen: Any) -> list[int]:
    """The first ``SAMPLE_TASKS`` tasks' trajectories in the export's order (task key, task
    text, id), at most ``SAMPLE_TRAJECTORIES`` of them."""
    rows = (
        chosen.annotate(task_digest=MD5("task"))
        .order_by("task_key", "task_digest", "id")
        .values_list("id", "task_key", "task_digest")[: SAMPLE_TRAJECTORIES + 1]
    )
    ids: list[int] = []
    tasks: set[tuple[str, str]] = set()
    for pk, task_key, digest in rows:
        if (task_key, digest) not in tasks and len(tasks) == SAMPLE_TASKS:
            break
        tasks.add((task_key, digest))
        ids.append(pk)
    return ids[:SAMPLE_TRAJECTORIES]


def _sample_trajectories(plan: ExportPlan, ids: list[int]) -> Iterator[ExportTrajectory]:
    if not ids:
        return
    lossless = "annotators" in plan.reads
    with closing(read_chunks(plan, ids, sample=True)) as chunks:
        for chunk_ids, heads, rows, first_errors in chunks:
            yield from trajectories_from_rows(chunk_ids, heads, rows, lossless, first_errors)
