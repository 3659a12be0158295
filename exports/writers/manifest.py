"""The manifest written beside an export's files (no Django): what was selected and how
it was labelled, which revisions produced the labels, scores and credits, what came out,
and the sha256 of every file, so a training run can say exactly what it trained on.

It holds no time or host name: the same export gives the same manifest bytes. It is
written last, after every data file is in place, so a directory with data files and no
manifest is an export that did not finish.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from exports.writers.export import ExportResult
from exports.writers.output import WrittenFile, write_json_file

MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"


# ExportOptions fields newer than the manifest format (rubrics, issue #36).
LATER_OPTIONS = ("rubric",)


def build_manifest(
    result: ExportResult,
    *,
    selection: Mapping[str, Any],
    label_source: str,
    schema_revision: Any = None,
    scorer_revisions: Mapping[str, Any] | None = None,
    attribution_revisions: Mapping[str, Any] | None = None,
    annotators: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The manifest as a plain dict.

    ``selection`` is the frozen definition of the saved selection (its filters, as
    stored). ``schema_revision`` names the label schema version, ``scorer_revisions``
    and ``attribution_revisions`` map each scorer or attribution run used to its model
    revision and parameters. ``annotators`` are the people whose labels the label source
    drew on; without it, the annotators of the per-annotator labels read are listed.
    """
    options = dataclasses.asdict(result.options)
    options["neutral"] = result.options.neutral.value
    # Options added after manifests were first written show only when set, so an export
    # that uses none of them keeps the manifest it had.
    for name in LATER_OPTIONS:
        if not options[name]:
            del options[name]
    outputs = sorted({file.output for file in result.files})
    writer: dict[str, str] = {}
    if result.container == "parquet":
        writer["pyarrow"] = pa.__version__
    if result.compressed:
        writer["zlib"] = zlib.ZLIB_RUNTIME_VERSION
    return {
        "manifest_version": MANIFEST_VERSION,
        "format": result.format,
        "container": result.container,
        "compression": "gzip" if result.compressed else None,
        "selection": dict(selection),
        "label_source": label_source,
        "neutral": result.options.neutral.value,
        "options": options,
        "revisions": {
            "label_schema": schema_revision,
            "scorers": dict(scorer_revisions or {}),
            "attribution": dict(attribution_revisions or {}),
        },
        "annotators": sorted(set(annotators if annotators is not None else result.annotators)),
        "counts": {
            "trajectories": result.counts["trajectories"],
            "tasks": result.counts["tasks"],
            "steps": result.counts["steps"],
            "labelable_steps": result.counts["labelable_steps"],
            "records": {name: result.counts[f"records:{name}"] for name in outputs},
            "notes": dict(result.notes),
        },
        "label_distribution": {
            "resolved": dict(result.labels),
            "after_neutral_mapping": dict(result.mapped_labels),
        },
        "split": {
            "spec": None if result.splits is None else str(result.splits),
            "seed": result.seed,
            "sizes": {
                split: {
                    "tasks": sizes["tasks"],
                    "trajectories": sizes["trajectories"],
                    "steps": sizes["steps"],
                    "records": {name: sizes[f"records:{name}"] for name in outputs},
                }
                for split, sizes in result.split_sizes.items()
            },
        },
        "files": {
            file.name: {
                "output": file.output,
                "split": file.split,
                "rows": file.rows,
                "bytes": file.size,
                "sha256": file.sha256,
            }
            for file in result.files
        },
        "writer": writer,
        "warnings": export_warnings(result),
    }


def export_warnings(result: ExportResult) -> list[str]:
    """What a person reading the manifest (or the export's page) should know about an
    export that may not hold what was asked for: an output that came out empty, and a
    DPO export without sibling pairs (rollouts of a task that branch at a step)."""
    warnings: list[str] = []
    outputs = sorted({file.output for file in result.files})
    if result.format == "dpo" and result.notes["sibling_pairs"] == 0:
        kept = result.counts["records:dpo"]
        warnings.append(
            "No sibling pairs: no two rollouts of one task share a prefix and then differ"
            f" by at least {result.options.min_margin:g} in {result.options.pair_value}"
            f" at the next step ({result.counts['tasks']} tasks,"
            f" {result.counts['trajectories']} trajectories)."
            + (
                f" Only the {kept} correction pairs were written."
                if kept
                else " The files are empty: roll out several continuations of a task's"
                " steps, or add corrections, to make pairs."
            )
        )
    for name in outputs:
        if result.counts[f"records:{name}"] == 0 and not (result.format == "dpo" and warnings):
            notes = ", ".join(f"{key} {count}" for key, count in sorted(result.notes.items()))
            warnings.append(
                f"No {name} records: the selection's {result.counts['trajectories']}"
                " trajectories gave none" + (f" ({notes})." if notes else ".")
            )
    return warnings


def write_manifest(directory: Path, manifest: Mapping[str, Any]) -> WrittenFile:
    """``manifest.json`` in ``directory``: indented, keys sorted, atomically."""
    return write_json_file(Path(directory) / MANIFEST_NAME, manifest)
