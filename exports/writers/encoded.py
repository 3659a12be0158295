"""``trl-stepwise`` records that arrive encoded, one per trajectory (no Django).

For a large ``trl-stepwise`` export as JSON, PostgreSQL can build each record's JSON
text itself (its ``to_json`` escapes strings exactly as ``json.dumps`` with
``ensure_ascii=False`` does, and the Django side writes the compact separators), so no
step becomes a Python object. What comes here per trajectory is the record, or None
where :func:`exports.writers.records.trl_stepwise_records` gives none, with what
the manifest counts; :func:`write_trl_stepwise_encoded` writes the same files and
manifest figures as ``write_export`` does from the same trajectories (a test holds the
two to it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exports.writers.columnar import PlannedGroup, count_groups
from exports.writers.export import (
    ExportFiles,
    ExportResult,
    check_export,
    export_format,
    label_key,
)
from exports.writers.inputs import ExportOptions
from exports.writers.labels import LABEL_VALUES, map_label
from exports.writers.output import Container, JsonRecordWriter
from exports.writers.splits import SplitSpec

# Trajectories per progress report.
PROGRESS_EVERY = 1000


@dataclass(frozen=True, slots=True)
class EncodedTrajectory:
    split: int  # the position of the trajectory's split in the export's split names
    steps: int
    # Labelable steps whose resolved label is -1, 0, +1, or missing.
    labels: tuple[int, int, int, int]
    # The record ends before a labelable step without a (mapped) label.
    cut: bool
    # The record's JSON text, or None when it has no labelled step.
    record: str | None


def write_trl_stepwise_encoded(
    groups: Sequence[PlannedGroup],
    trajectories: Iterable[EncodedTrajectory],
    *,
    options: ExportOptions,
    out_dir: Path,
    container: Container = "jsonl",
    compress: bool = False,
    splits: SplitSpec | None = None,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write a ``trl-stepwise`` export as JSON Lines (or a JSON array) from
    ``trajectories``: one item per trajectory of ``groups``, in order."""
    export = export_format("trl-stepwise")
    if container == "parquet":
        raise ValueError("encoded records are JSON; Parquet is written from the rows")
    check_export(export, options, container, compress)
    files = ExportFiles(
        export, options, out_dir, container, compress=compress, splits=splits, seed=seed
    )
    result = files.result
    count_groups(result, groups)
    writers = [files.writers["trl-stepwise", split] for split in files.split_names]
    labels = [0, 0, 0, 0]
    records: Counter[str] = Counter()
    cut = skipped = steps = done = 0
    with files:
        for trajectory in trajectories:
            name = files.split_names[trajectory.split]
            result.split_sizes[name]["steps"] += trajectory.steps
            steps += trajectory.steps
            for position, count in enumerate(trajectory.labels):
                labels[position] += count
            cut += trajectory.cut
            if trajectory.record is None:
                skipped += 1
            else:
                writer = writers[trajectory.split]
                assert isinstance(writer, JsonRecordWriter)
                writer.write_encoded(trajectory.record)
                records[name] += 1
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(PROGRESS_EVERY)
        if progress is not None and done % PROGRESS_EVERY:
            progress(done % PROGRESS_EVERY)
    result.counts["steps"] = steps
    result.counts["labelable_steps"] = sum(labels)
    for name, count in records.items():
        result.split_sizes[name]["records:trl-stepwise"] += count
        result.counts["records:trl-stepwise"] += count
    # Keys only for what occurred, as the row builders' counters have them.
    for value, count in zip((*LABEL_VALUES, None), labels, strict=True):
        if count:
            result.labels[label_key(value)] += count
            result.mapped_labels[label_key(map_label(value, options.neutral))] += count
    if cut:
        result.notes["cut_at_unlabelled_step"] += cut
    if skipped:
        result.notes["skipped_no_labelled_step"] += skipped
    return result
