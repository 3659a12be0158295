"""Training batches from curated trajectories (no Django).

The Django side reads the selected trajectories with their resolved labels, scores and
credits into :class:`ExportTrajectory` snapshots and streams them here; this package
builds the records of each format, splits tasks into train/test, writes the files
deterministically and atomically, and builds the manifest.

- ``inputs``: ExportStep, ExportTrajectory, TaskGroup, ExportOptions
- ``labels``: the neutral mapping and label helpers
- ``text``: how steps read as text and as chat messages
- ``records``, ``pairs``, ``rl``: the record builders
- ``splits``: split specs and the task-to-split hash
- ``output``, ``schemas``: JSON Lines / JSON / gzip / Parquet writers
- ``export``: the formats and ``write_export``; ``manifest``: the manifest

docs/formats.md ("Exports") describes every format with an example record.
"""

from exports.writers.export import (
    DEFAULT_SPLIT,
    FORMATS,
    ExportedFile,
    ExportFormat,
    ExportResult,
    build_records,
    export_format,
    records,
    task_groups,
    write_export,
)
from exports.writers.inputs import (
    ExportOptions,
    ExportSpan,
    ExportStep,
    ExportTrajectory,
    TaskGroup,
)
from exports.writers.labels import (
    Neutral,
    first_error_position,
    label_to_bool,
    map_label,
    mapped_bool,
    parse_neutral,
)
from exports.writers.manifest import build_manifest, write_manifest
from exports.writers.output import WrittenFile, write_records
from exports.writers.splits import SplitSpec, SplitSpecError, parse_split_spec, split_for

__all__ = [
    "DEFAULT_SPLIT",
    "FORMATS",
    "ExportFormat",
    "ExportOptions",
    "ExportResult",
    "ExportSpan",
    "ExportStep",
    "ExportTrajectory",
    "ExportedFile",
    "Neutral",
    "SplitSpec",
    "SplitSpecError",
    "TaskGroup",
    "WrittenFile",
    "build_manifest",
    "build_records",
    "export_format",
    "first_error_position",
    "label_to_bool",
    "map_label",
    "mapped_bool",
    "parse_neutral",
    "parse_split_spec",
    "records",
    "split_for",
    "task_groups",
    "write_export",
    "write_manifest",
    "write_records",
]
