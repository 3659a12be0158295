"""Exports end to end (no Django): the formats, task grouping with splits, and writing
every output file of an export in one pass over a stream of trajectories.

The trajectories arrive as an iterator in a stable order (the Django side reads them from
PostgreSQL in chunks, ordered by task key, task text and id). Consecutive trajectories
with the same group key form a :class:`TaskGroup`; the group's split comes from its key
alone (splits.py). ``dpo`` and ``rl`` need every rollout of a task in one group, so for
them a task key that comes back after another task is an error rather than a silently
incomplete export.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from exports.writers import schemas
from exports.writers.inputs import ExportOptions, ExportTrajectory, TaskGroup
from exports.writers.labels import Neutral, map_label
from exports.writers.output import (
    CONTAINERS,
    DEFAULT_ROW_GROUP_SIZE,
    EXTENSIONS,
    Container,
    JsonRecordWriter,
    ParquetRecordWriter,
    open_writer,
)
from exports.writers.pairs import dpo_records
from exports.writers.records import (
    critique_records,
    kto_records,
    prm800k_records,
    processbench_records,
    sft_records,
    span_records,
    stepscope_records,
    trl_stepwise_records,
)
from exports.writers.rl import rl_step_rows, verl_prompt_records
from exports.writers.splits import SplitSpec, split_for

Record = dict[str, Any]
Builder = Callable[[TaskGroup, ExportOptions, Counter[str]], Iterator[Record]]
# The split every task falls in when an export has no split spec.
DEFAULT_SPLIT = "train"


# What a format's records can carry beyond each step's text and resolved label: the
# reading code reads these only for a format that declares them.
#   metadata        each step's metadata (tool call ids, token logprobs)
#   prefix_hashes   each step's prefix hash (sibling steps of rollouts that share a prefix)
#   corrections     an annotator's corrected text for a step
#   annotators      every annotator's label on each step, and the label source's own
#                   first error and decisive failure per trajectory (the lossless format)
#   training        what an RL trainer knew of each step (policy version, logprobs, ...)
#   critiques       an LLM judge's critique of each step (``options.critiques``)
#   decisive        a trajectory's decisive failure (``options.decisive``)
#   rubric          an annotator's rubric results and episode verdicts (``options.rubric``)
#   pairs           sibling steps compared by ``options.pair_value``
#   spans           every annotator's span labels (runs of steps with a value)
Reads = frozenset[str]
READS = frozenset(
    {
        "metadata",
        "prefix_hashes",
        "corrections",
        "annotators",
        "training",
        "critiques",
        "decisive",
        "rubric",
        "pairs",
        "spans",
    }
)


@dataclass(frozen=True)
class Output:
    """One file set of a format: ``rl`` writes step rows and verl prompts. ``columns``:
    which of ``critiques`` and ``decisive`` add a column to its records when the
    options ask (records.py adds the keys; output_schema the Parquet columns)."""

    name: str
    build: Builder
    schema: pa.Schema | None = None
    columns: Reads = frozenset()


@dataclass(frozen=True)
class ExportFormat:
    name: str
    # What the export page calls it.
    label: str
    outputs: tuple[Output, ...]
    # The containers the format can be written in; the first is the default.
    containers: tuple[Container, ...]
    # What its records carry beside the steps' text and labels (``READS``).
    reads: Reads = frozenset()
    # Needs every rollout of a task in one group (sibling pairs, one prompt per task).
    whole_tasks: bool = False
    # Writes labels as booleans, so a neutral label must become one (no ``keep``).
    boolean_labels: bool = False
    # Its rows are a judge's replies: an export names the judge (``options.critiques``).
    needs_critiques: bool = False

    def __post_init__(self) -> None:
        unknown = self.reads - READS
        assert not unknown, f"{self.name} reads {sorted(unknown)}: not in READS"


def output_schema(output: Output, options: ExportOptions) -> pa.Schema | None:
    """The output's Parquet schema with the columns the options add."""
    schema = output.schema
    if schema is None:
        return None
    if options.critiques and "critiques" in output.columns:
        schema = schema.append(schemas.CRITIQUES)
    if options.decisive and "decisive" in output.columns:
        schema = schema.append(schemas.DECISIVE)
    return schema


# In the export page's order.
FORMATS: dict[str, ExportFormat] = {
    export_format.name: export_format
    for export_format in (
        ExportFormat(
            "trl-stepwise",
            "TRL stepwise (prompt, completions, labels)",
            (
                Output(
                    "trl-stepwise",
                    trl_stepwise_records,
                    schemas.TRL_STEPWISE,
                    columns=frozenset({"critiques", "decisive"}),
                ),
            ),
            ("jsonl", "parquet", "json"),
            reads=frozenset({"critiques", "decisive", "rubric"}),
            boolean_labels=True,
        ),
        ExportFormat(
            "stepscope",
            "Stepscope JSONL (lossless)",
            (Output("stepscope", stepscope_records),),
            ("jsonl",),
            reads=frozenset({"metadata", "annotators", "training", "decisive"}),
        ),
        ExportFormat(
            "prm800k",
            "PRM800K-style",
            (Output("prm800k", prm800k_records, columns=frozenset({"decisive"})),),
            ("jsonl",),
            reads=frozenset({"decisive", "rubric"}),
        ),
        ExportFormat(
            "processbench",
            "ProcessBench-style",
            (
                Output(
                    "processbench",
                    processbench_records,
                    schemas.PROCESSBENCH,
                    columns=frozenset({"decisive"}),
                ),
            ),
            ("json", "jsonl", "parquet"),
            reads=frozenset({"decisive"}),
        ),
        ExportFormat(
            "dpo",
            "DPO pairs (prompt, chosen, rejected)",
            (Output("dpo", dpo_records, schemas.DPO),),
            ("jsonl", "parquet", "json"),
            reads=frozenset({"prefix_hashes", "corrections", "pairs"}),
            whole_tasks=True,
        ),
        ExportFormat(
            "kto",
            "KTO (prompt, completion, label)",
            (Output("kto", kto_records, schemas.KTO),),
            ("jsonl", "parquet", "json"),
            boolean_labels=True,
        ),
        ExportFormat(
            "sft",
            "SFT chat messages",
            (Output("sft", sft_records, schemas.SFT),),
            ("jsonl", "parquet", "json"),
            reads=frozenset({"metadata"}),
        ),
        ExportFormat(
            "critique",
            "Critiques: a judge's replies as SFT rows (prompt, completion)",
            (Output("critique", critique_records, schemas.CRITIQUE),),
            ("jsonl", "parquet", "json"),
            reads=frozenset({"critiques"}),
            needs_critiques=True,
        ),
        ExportFormat(
            "rl",
            "RL batch with per-step rewards (Parquet)",
            (
                Output("rl", rl_step_rows, schemas.RL_STEPS),
                Output("rl-prompts", verl_prompt_records, schemas.RL_PROMPTS),
            ),
            ("parquet", "jsonl"),
            reads=frozenset({"metadata"}),
            whole_tasks=True,
        ),
        ExportFormat(
            "spans",
            "Span labels: segments and per-step values",
            (Output("spans", span_records),),
            ("jsonl", "json"),
            reads=frozenset({"spans"}),
        ),
    )
}


def formats_reading(read: str) -> list[str]:
    """The names of the formats whose records can carry ``read`` (one of ``READS``)."""
    return [name for name, export in FORMATS.items() if read in export.reads]


def export_format(name: str) -> ExportFormat:
    try:
        return FORMATS[name]
    except KeyError:
        known = ", ".join(FORMATS)
        raise ValueError(f"unknown export format {name!r}; known formats: {known}") from None


def check_export(
    export: ExportFormat, options: ExportOptions, container: Container, compress: bool
) -> None:
    """Refuse combinations that cannot give a correct file, before anything is read."""
    if container not in CONTAINERS:
        raise ValueError(
            f"unknown container {container!r}; expected one of {', '.join(CONTAINERS)}"
        )
    if container not in export.containers:
        allowed = ", ".join(export.containers)
        raise ValueError(
            f"{export.name} cannot be written as {container}; it is written as {allowed}"
        )
    if compress and container == "parquet":
        raise ValueError("Parquet compresses its own columns; gzip applies to JSON only")
    if export.needs_critiques and not options.critiques:
        raise ValueError(f"{export.name} rows are a judge's critiques; name the judge (critiques)")
    if export.boolean_labels and options.neutral is Neutral.KEEP:
        raise ValueError(
            f"{export.name} writes labels as booleans; map neutral labels with "
            "positive, negative or drop, not keep"
        )


def task_groups(
    trajectories: Iterable[ExportTrajectory],
    *,
    splits: SplitSpec | None = None,
    seed: int = 0,
    whole_tasks: bool = False,
) -> Iterator[TaskGroup]:
    """Consecutive trajectories with the same group key, with their split.

    With ``whole_tasks`` a key that comes back after a different one raises ValueError:
    the input was not ordered by task. (That check keeps the keys seen, one string per
    task.)
    """
    seen: set[str] = set()
    groups_per_split: Counter[str] = Counter()
    trajectories_per_split: Counter[str] = Counter()
    pending: list[ExportTrajectory] = []

    def group() -> TaskGroup:
        key = pending[0].group_key
        split = DEFAULT_SPLIT if splits is None else split_for(key, splits, seed)
        made = TaskGroup(
            key=key,
            split=split,
            index=groups_per_split[split],
            trajectory_offset=trajectories_per_split[split],
            trajectories=list(pending),
        )
        groups_per_split[split] += 1
        trajectories_per_split[split] += len(pending)
        return made

    for trajectory in trajectories:
        if pending and trajectory.group_key != pending[0].group_key:
            yield group()
            pending.clear()
        if not pending and whole_tasks:
            key = trajectory.group_key
            if key in seen:
                raise ValueError(
                    f"task {key!r} appears again after other tasks (trajectory "
                    f"{trajectory.external_id!r}); order the trajectories by task key"
                )
            seen.add(key)
        pending.append(trajectory)
    if pending:
        yield group()


def build_records(
    format_name: str,
    trajectories: Iterable[ExportTrajectory],
    options: ExportOptions,
    *,
    splits: SplitSpec | None = None,
    seed: int = 0,
    tally: Counter[str] | None = None,
) -> Iterator[tuple[str, str, Record]]:
    """``(output name, split, record)`` for every record of the export, in order."""
    export = export_format(format_name)
    check_export(export, options, export.containers[0], False)
    counts: Counter[str] = Counter() if tally is None else tally
    for group in task_groups(
        trajectories, splits=splits, seed=seed, whole_tasks=export.whole_tasks
    ):
        for output in export.outputs:
            for record in output.build(group, options, counts):
                yield output.name, group.split, record


def records(
    format_name: str,
    trajectories: Iterable[ExportTrajectory],
    options: ExportOptions,
    *,
    output: str | None = None,
) -> Iterator[Record]:
    """The records of one output (the format's first unless named), without splits."""
    wanted = output or export_format(format_name).outputs[0].name
    for name, _, record in build_records(format_name, trajectories, options):
        if name == wanted:
            yield record


@dataclass(frozen=True)
class ExportedFile:
    name: str
    output: str
    split: str
    path: Path
    rows: int
    sha256: str
    size: int


@dataclass
class ExportResult:
    """What an export wrote and read; manifest.build_manifest turns it into the manifest."""

    format: str
    container: Container
    compressed: bool
    splits: SplitSpec | None
    seed: int
    options: ExportOptions
    files: list[ExportedFile] = field(default_factory=list)
    # trajectories, tasks, steps, labelable_steps, and records per output.
    counts: Counter[str] = field(default_factory=Counter)
    # Per split: tasks, trajectories, steps, and records per output.
    split_sizes: dict[str, Counter[str]] = field(default_factory=dict)
    # Resolved labels of the labelable steps read ("-1", "0", "1", "none"), before and
    # after the neutral mapping.
    labels: Counter[str] = field(default_factory=Counter)
    mapped_labels: Counter[str] = field(default_factory=Counter)
    # What the builders left out or cut, and pair counts (records.py, pairs.py).
    notes: Counter[str] = field(default_factory=Counter)
    # Annotators seen in the trajectories' per-annotator labels.
    annotators: set[str] = field(default_factory=set)


def file_name(output: str, split: str | None, container: Container, compress: bool) -> str:
    suffix = f"-{split}" if split else ""
    return f"{output}{suffix}{EXTENSIONS[container]}{'.gz' if compress else ''}"


def write_export(
    trajectories: Iterable[ExportTrajectory],
    *,
    format_name: str,
    options: ExportOptions,
    out_dir: Path,
    container: Container | None = None,
    compress: bool = False,
    splits: SplitSpec | None = None,
    seed: int = 0,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
) -> ExportResult:
    """Write every file of an export into ``out_dir`` in one pass over ``trajectories``.

    Files are named ``{output}[-{split}].{jsonl|json|parquet}[.gz]``, one per output and
    split (a split no task fell in gets an empty file, so the file set is always the
    same). All files are written to temporary names and renamed only when every one is
    complete; on any error all of them are removed.
    """
    export = export_format(format_name)
    chosen: Container = container or export.containers[0]
    check_export(export, options, chosen, compress)
    files = ExportFiles(
        export,
        options,
        out_dir,
        chosen,
        compress=compress,
        splits=splits,
        seed=seed,
        row_group_size=row_group_size,
    )
    result = files.result
    with files:
        groups = task_groups(
            _counted(trajectories, result),
            splits=splits,
            seed=seed,
            whole_tasks=export.whole_tasks,
        )
        for group in groups:
            sizes = result.split_sizes[group.split]
            sizes["tasks"] += 1
            sizes["trajectories"] += len(group.trajectories)
            sizes["steps"] += sum(len(trajectory.steps) for trajectory in group.trajectories)
            result.counts["tasks"] += 1
            for output in export.outputs:
                writer = files.writers[output.name, group.split]
                for record in output.build(group, options, result.notes):
                    writer.write(record)
                    sizes[f"records:{output.name}"] += 1
                    result.counts[f"records:{output.name}"] += 1
    return result


class ExportFiles:
    """The files of one export (a writer per output and split) and the result that
    counts what goes in them. Used as ``with``: every file is committed when the block
    ends, or every one removed if it raises, and ``result.files`` lists them."""

    def __init__(
        self,
        export: ExportFormat,
        options: ExportOptions,
        out_dir: Path,
        container: Container,
        *,
        compress: bool = False,
        splits: SplitSpec | None = None,
        seed: int = 0,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    ) -> None:
        self.result = ExportResult(
            format=export.name,
            container=container,
            compressed=compress,
            splits=splits,
            seed=seed,
            options=options,
        )
        self.split_names = splits.names if splits is not None else (DEFAULT_SPLIT,)
        for split in self.split_names:
            self.result.split_sizes[split] = Counter()
        self.writers: dict[tuple[str, str], JsonRecordWriter | ParquetRecordWriter] = {}
        try:
            for output in export.outputs:
                for split in self.split_names:
                    name = file_name(output.name, split if splits else None, container, compress)
                    self.writers[output.name, split] = open_writer(
                        Path(out_dir) / name,
                        container,
                        schema=output_schema(output, options),
                        compress=compress,
                        row_group_size=row_group_size,
                    )
        except BaseException:
            self._abort()
            raise

    def __enter__(self) -> ExportFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is not None:
            self._abort()
            return
        try:
            for writer in self.writers.values():
                writer.finish()
            for (output_name, split), writer in self.writers.items():
                written = writer.commit()
                self.result.files.append(
                    ExportedFile(
                        name=written.path.name,
                        output=output_name,
                        split=split,
                        path=written.path,
                        rows=written.rows,
                        sha256=written.sha256,
                        size=written.size,
                    )
                )
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        for writer in self.writers.values():
            writer.abort()


def _counted(
    trajectories: Iterable[ExportTrajectory], result: ExportResult
) -> Iterator[ExportTrajectory]:
    neutral = result.options.neutral
    for trajectory in trajectories:
        result.counts["trajectories"] += 1
        result.counts["steps"] += len(trajectory.steps)
        # Counted per distinct value, then mapped: a handful of keys per trajectory
        # instead of four counter updates per step.
        values = Counter(step.label for step in trajectory.steps if step.labelable)
        result.counts["labelable_steps"] += values.total()
        for value, count in values.items():
            result.labels[label_key(value)] += count
            result.mapped_labels[label_key(map_label(value, neutral))] += count
        for step_labels in trajectory.labels_by_annotator:
            result.annotators.update(annotator for annotator, _ in step_labels)
        yield trajectory


def label_key(value: int | None) -> str:
    return "none" if value is None else str(value)
