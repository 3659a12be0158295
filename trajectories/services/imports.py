"""Imports: a file (or an API push) parsed by a Django-free parser and written in bulk
with ``COPY`` in one all-or-nothing transaction."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import connection, transaction
from django.utils import timezone

from labeling.models import TERNARY_VALUES, LabelSchema, StepLabel
from stepscope.queueing import broker_require
from trajectories import pgcopy
from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedTrajectory, Parser, RecordError
from trajectories.hashing import content_hash, prefix_hashes
from trajectories.models import ImportBatch, Project, Step, Trajectory
from trajectories.services.progress import ProgressWriter
from trajectories.services.projects import imported_annotator

# Trajectories written per COPY round trip; bounds memory for large files.
IMPORT_CHUNK = 2000
# Errors kept on a batch; the count of all of them is kept too.
MAX_ERRORS_KEPT = 1000


class ImportRejected(Exception):
    """All-or-nothing import found bad records; nothing was written."""

    def __init__(self, batch: ImportBatch) -> None:
        super().__init__(f"{batch.rejected_count} record(s) rejected in {batch.file_name}")
        self.batch = batch


@dataclasses.dataclass
class _Counts:
    created: int = 0
    unchanged: int = 0
    steps: int = 0
    errors: list[RecordError] = dataclasses.field(default_factory=list)
    # (new trajectory id, its parent's external id) for rollouts that continue another.
    children: list[tuple[int, str]] = dataclasses.field(default_factory=list)


def parser_get(source_format: str, mapping: dict[str, Any] | None = None) -> Parser:
    """The parser for ``--format``; the ``mapped`` format needs its mapping. Raises
    ValueError naming the problem (unknown format, bad mapping)."""
    if source_format == "mapped":
        from trajectories.formats.mapped import load_mapping, parser_with_mapping

        if mapping is None:
            raise ValueError("the mapped format needs a mapping (--mapping FILE)")
        return parser_with_mapping(load_mapping(mapping))
    return parser_for(source_format)


def trajectory_import(
    *,
    project: Project,
    source_format: str,
    path: Path,
    user: User | None = None,
    skip_invalid: bool = False,
    mapping: dict[str, Any] | None = None,
) -> ImportBatch:
    """Import one file into ``project``, in this process.

    Re-importing a trajectory already present (same content hash) changes nothing. By
    default the import is all-or-nothing: if any record is malformed, nothing from the
    file is written, the batch is saved as failed with every error (location and field),
    and :class:`ImportRejected` is raised. With ``skip_invalid`` the good records are
    written and the bad ones reported.
    """
    parser = parser_get(source_format, mapping)
    batch = ImportBatch.objects.create(
        project=project,
        file_name=path.name,
        source_format=source_format,
        created_by=user,
        mapping=mapping,
        skip_invalid=skip_invalid,
        file_size=path.stat().st_size,
    )
    _import_into(batch, path, parser)
    if batch.status == ImportBatch.Status.FAILED:
        raise ImportRejected(batch)
    return batch


def trajectory_records_import(
    *,
    project: Project,
    records: list[dict[str, Any]],
    user: User | None = None,
    skip_invalid: bool = False,
) -> ImportBatch:
    """Import a few trajectories given as Stepscope-format records (an API push), at once,
    through the same parser and writer as a file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "api-push.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        return trajectory_import(
            project=project,
            source_format="stepscope",
            path=path,
            user=user,
            skip_invalid=skip_invalid,
        )


def import_upload_start(
    *,
    project: Project,
    user: User,
    source_format: str,
    upload: UploadedFile,
    skip_invalid: bool = False,
    mapping: dict[str, Any] | None = None,
) -> ImportBatch:
    """Store an uploaded file and queue its import on the ``default`` queue."""
    from trajectories.tasks import import_run

    parser_get(source_format, mapping)  # fail now, not in the worker, on a bad format
    broker_require()  # a dead broker is said now, not left as a batch queued forever
    name = Path(upload.name or "upload").name[:200]
    folder = Path(settings.MEDIA_ROOT) / "imports" / uuid.uuid4().hex
    folder.mkdir(parents=True)
    stored = folder / name
    with stored.open("wb") as out:
        for piece in upload.chunks():
            out.write(piece)
    with transaction.atomic():
        batch = ImportBatch.objects.create(
            project=project,
            file_name=name,
            source_format=source_format,
            status=ImportBatch.Status.QUEUED,
            stored_path=str(stored),
            mapping=mapping,
            skip_invalid=skip_invalid,
            file_size=stored.stat().st_size,
            created_by=user,
        )
        transaction.on_commit(lambda: import_run.delay(batch.pk))
    return batch


def import_batch_run(*, batch_id: int) -> ImportBatch:
    """Run a queued import (the Celery task's body). Safe to run again after a worker
    died: the import is one transaction, so a rerun starts from a clean slate, and a
    finished batch is left as it is."""
    with transaction.atomic():
        batch = ImportBatch.objects.select_for_update().get(pk=batch_id)
        if batch.status in (ImportBatch.Status.DONE, ImportBatch.Status.FAILED):
            return batch
        batch.status = ImportBatch.Status.RUNNING
        batch.save(update_fields=["status"])
    path = Path(batch.stored_path)
    try:
        parser = parser_get(batch.source_format, batch.mapping)
    except ValueError as error:
        parser = None
        problem = RecordError(location="file", field="", message=str(error))
    if parser is None or not path.is_file():
        if parser is not None:
            problem = RecordError(location="file", field="", message="the uploaded file is gone")
        batch.status = ImportBatch.Status.FAILED
        batch.errors = [dataclasses.asdict(problem)]
        batch.rejected_count = 1
        batch.finished_at = timezone.now()
        batch.save()
        return batch
    _import_into(batch, path, parser)
    shutil.rmtree(path.parent, ignore_errors=True)
    return batch


def _import_into(batch: ImportBatch, path: Path, parser: Parser) -> None:
    counts = _Counts()
    skip_invalid = batch.skip_invalid
    file_failed = False
    progress = ProgressWriter("trajectories_importbatch", batch.pk, "processed_count")
    try:
        with transaction.atomic():
            # One import per project at a time: the content-hash check and the COPY
            # must not interleave with another import of the same rows.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [7301, batch.project_id])
            schema = _default_schema(batch.project)
            for chunk in _chunks(parser(path), IMPORT_CHUNK):
                records = [r for r in chunk if isinstance(r, ParsedTrajectory)]
                counts.errors.extend(r for r in chunk if isinstance(r, RecordError))
                progress.report(len(chunk))
                if counts.errors and not skip_invalid:
                    continue  # keep parsing to report every error, write nothing more
                _write_chunk(batch.project, batch, schema, batch.source_format, records, counts)
            if counts.errors and not skip_invalid:
                raise _Rollback
            _link_parents(batch.project_id, counts.children)
    except _Rollback:
        counts.created = counts.steps = 0
    except FileError as error:
        counts.errors.append(RecordError(location="file", field="", message=str(error)))
        counts.created = counts.steps = 0
        file_failed = True
    finally:
        progress.close()

    failed = file_failed or (bool(counts.errors) and not skip_invalid)
    batch.status = ImportBatch.Status.FAILED if failed else ImportBatch.Status.DONE
    batch.created_count = counts.created
    batch.unchanged_count = counts.unchanged
    batch.rejected_count = len(counts.errors)
    batch.step_count = counts.steps
    batch.processed_count = progress.done
    batch.errors = [dataclasses.asdict(e) for e in counts.errors[:MAX_ERRORS_KEPT]]
    batch.finished_at = timezone.now()
    batch.save()


class _Rollback(Exception):
    pass


def _default_schema(project: Project) -> LabelSchema:
    schema = project.label_schemas.filter(is_active=True).order_by("-version").first()
    if schema is None:
        schema = LabelSchema.objects.create(project=project, values=TERNARY_VALUES)
    return schema


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_chunk(
    project: Project,
    batch: ImportBatch,
    schema: LabelSchema,
    source_format: str,
    records: list[ParsedTrajectory],
    counts: _Counts,
) -> None:
    by_hash: dict[str, tuple[ParsedTrajectory, list[str]]] = {}
    hashed = 0
    for record in records:
        try:
            step_hashes = prefix_hashes(record.task, record.steps)
            digest = content_hash(record, source_format, step_hashes=step_hashes)
        except ValueError:  # a lone surrogate cannot be encoded, so cannot be stored
            counts.errors.append(_unstorable(record))
            continue
        hashed += 1
        by_hash.setdefault(digest, (record, step_hashes))
    existing = set(
        Trajectory.objects.filter(project=project, content_hash__in=list(by_hash)).values_list(
            "content_hash", flat=True
        )
    )
    # Repeats within the file and trajectories already in the project are unchanged.
    counts.unchanged += hashed - len(by_hash) + len(existing)
    new = [(digest, *pair) for digest, pair in by_hash.items() if digest not in existing]
    if not new:
        return

    trajectory_ids = _allocate_ids(Trajectory, len(new))
    step_total = sum(len(record.steps) for _, record, _ in new)
    step_ids = iter(_allocate_ids(Step, step_total))
    annotators: dict[str, int] = {}
    text, json_text = pgcopy.text, pgcopy.json_text
    submitted = StepLabel.Status.SUBMITTED.value
    now = timezone.now().isoformat()
    trajectory_rows: list[str] = []
    source_rows: list[str] = []
    step_rows: list[str] = []
    label_rows: list[str] = []
    written_steps = 0
    for trajectory_id, (digest, record, step_hashes) in zip(trajectory_ids, new, strict=True):
        ids_for_steps = [next(step_ids) for _ in record.steps]
        try:
            rows = (
                pgcopy.row(
                    (
                        trajectory_id, project.pk, record.external_id, source_format,
                        record.task_key, record.task, record.ground_truth, record.model_name,
                        record.outcome_reward, record.success, pgcopy.Json(record.metadata),
                        len(record.steps), digest, batch.pk, record.branch_index, now,
                    )
                ),
                pgcopy.row((trajectory_id, record.location[:100], pgcopy.Json(record.raw))),
                [
                    # Steps are most of the rows: formatted directly rather than via row().
                    f"{step_id}\t{trajectory_id}\t{index}\t{text(step.kind)}\t{text(step.role)}"
                    f"\t{text(step.agent)}\t{text(step.content)}\t{text(step.tool_name)}"
                    f"\t{json_text(step.tool_args)}\t{json_text(step.metadata)}"
                    f"\t{'t' if step.labelable else 'f'}\t{prefix}\n"
                    for index, (step, step_id, prefix) in enumerate(
                        zip(record.steps, ids_for_steps, step_hashes, strict=True)
                    )
                ],
            )  # fmt: skip
        except ValueError:  # NUL or a lone surrogate: PostgreSQL cannot store it
            counts.errors.append(_unstorable(record))
            continue
        trajectory_rows.append(rows[0])
        if record.raw is not None:
            source_rows.append(rows[1])
        step_rows.extend(rows[2])
        written_steps += len(record.steps)
        if record.parent_external_id:
            counts.children.append((trajectory_id, record.parent_external_id))
        for label in record.labels:
            if label.annotator not in annotators:
                annotators[label.annotator] = imported_annotator(label.annotator).pk
            label_rows.append(
                f"{ids_for_steps[label.step_index]}\t{annotators[label.annotator]}\t{schema.pk}"
                f"\t{int(label.value)}\t[]\t\t{submitted}\tf\t{now}\t{now}\n"
            )

    _copy(
        "trajectories_trajectory (id, project_id, external_id, source_format, task_key, task,"
        " ground_truth, model_name, outcome_reward, success, metadata, step_count,"
        " content_hash, import_batch_id, branch_index, created_at)",
        trajectory_rows,
    )
    _copy("trajectories_trajectorysource (trajectory_id, location, raw)", source_rows)
    _copy(
        "trajectories_step (id, trajectory_id, index, kind, role, agent, content, tool_name,"
        " tool_args, metadata, labelable, prefix_hash)",
        step_rows,
    )
    _copy(
        "labeling_steplabel (step_id, annotator_id, schema_id, value, tags, rationale, status,"
        " saw_model_scores, created_at, updated_at)",
        label_rows,
    )
    counts.created += len(trajectory_rows)
    counts.steps += written_steps


def _unstorable(record: ParsedTrajectory) -> RecordError:
    """Name the first field holding text PostgreSQL cannot store (NUL, lone surrogates)."""
    candidates: list[tuple[str, Any]] = [
        ("id", record.external_id),
        ("task", record.task),
        ("task_key", record.task_key),
        ("ground_truth", record.ground_truth),
        ("model", record.model_name),
        ("metadata", record.metadata),
    ]
    for index, step in enumerate(record.steps):
        for name in ("kind", "role", "agent", "content", "tool_name", "tool_args", "metadata"):
            candidates.append((f"steps.{index}.{name}", getattr(step, name)))
    candidates.append(("(source record)", record.raw))
    for name, value in candidates:
        if not _storable(value):
            return RecordError(record.location, name, "contains a NUL character or invalid Unicode")
    return RecordError(record.location, "", "contains text PostgreSQL cannot store")


def _storable(value: Any) -> bool:
    try:
        if isinstance(value, str):
            pgcopy.text(value)
        elif value is not None:
            pgcopy.json_text(value)
    except ValueError:
        return False
    return True


def _link_parents(project_id: int, children: list[tuple[int, str]]) -> None:
    """Point each continuation at the trajectory it continues: the newest one in the
    project with that external id (from this file or an earlier import)."""
    if not children:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE trajectories_trajectory AS child SET parent_id = parent.id
            FROM unnest(%s::bigint[], %s::text[]) AS link(child_id, parent_external_id)
            JOIN LATERAL (
                SELECT id FROM trajectories_trajectory
                WHERE project_id = %s AND external_id = link.parent_external_id
                ORDER BY id DESC LIMIT 1
            ) AS parent ON true
            WHERE child.id = link.child_id
            """,
            [[c for c, _ in children], [p for _, p in children], project_id],
        )


def _copy(table_and_columns: str, rows: list[str], batch_chars: int = 1 << 20) -> None:
    """COPY pre-encoded text rows, sent in pieces of about ``batch_chars``."""
    if not rows:
        return
    with (
        connection.cursor() as wrapper,
        wrapper.cursor.copy(f"COPY {table_and_columns} FROM STDIN") as copy,
    ):
        piece: list[str] = []
        size = 0
        for row in rows:
            piece.append(row)
            size += len(row)
            if size >= batch_chars:
                copy.write("".join(piece))
                piece, size = [], 0
        if piece:
            copy.write("".join(piece))


def _allocate_ids(model: type[Trajectory] | type[Step], count: int) -> list[int]:
    """Take ``count`` ids from the table's identity sequence, so rows written with COPY
    can reference each other (steps their trajectory, labels their step)."""
    if count == 0:
        return []
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [table, count],
        )
        return [row[0] for row in cursor.fetchall()]
