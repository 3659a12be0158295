"""Imports: a file (or an API push) parsed by a Django-free parser and written in bulk
with ``COPY`` in one all-or-nothing transaction."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import queue
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
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
from trajectories.formats.base import (
    FileError,
    ParsedTrajectory,
    Parser,
    ParseResult,
    RecordError,
)
from trajectories.hashing import content_hash, prefix_hashes
from trajectories.models import ImportBatch, Project, Step, Trajectory
from trajectories.services.progress import ProgressWriter
from trajectories.services.projects import imported_annotator

# Trajectories and steps written per round of COPY statements; bounds memory for large
# files while keeping the per-round queries few.
IMPORT_CHUNK = 1000
CHUNK_STEPS = 20_000
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
        batch.refresh_from_db()
        if batch.status in (ImportBatch.Status.DONE, ImportBatch.Status.FAILED):
            return batch  # another delivery of this task finished it meanwhile
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
            # A task handed out twice (it ran past the broker's visibility timeout) waits
            # above while the first run finishes; then there is nothing left to do.
            finished = (ImportBatch.Status.DONE, ImportBatch.Status.FAILED)
            if ImportBatch.objects.filter(pk=batch.pk, status__in=finished).exists():
                raise _AlreadyFinished
            writer = _ChunkWriter(batch, _default_schema(batch.project), counts)
            with _read_ahead(_hashed_chunks(parser(path), batch.source_format)) as chunks:
                for chunk in chunks:
                    progress.report(len(chunk))
                    records = []
                    for item in chunk:
                        if isinstance(item, RecordError):
                            counts.errors.append(item)
                        else:
                            records.append(item)
                    if counts.errors and not skip_invalid:
                        continue  # keep parsing to report every error, write nothing more
                    writer.write(records)
            if counts.errors and not skip_invalid:
                raise _Rollback
            _link_parents(batch.project_id, counts.children)
    except _AlreadyFinished:
        batch.refresh_from_db()
        return
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


class _AlreadyFinished(Exception):
    """Another run of the same batch finished while this one waited for the lock."""


class _Rollback(Exception):
    pass


def _default_schema(project: Project) -> LabelSchema:
    schema = project.label_schemas.filter(is_active=True).order_by("-version").first()
    if schema is None:
        schema = LabelSchema.objects.create(project=project, values=TERNARY_VALUES)
    return schema


@dataclasses.dataclass
class _Hashed:
    """A parsed trajectory with its content hash and the prefix hash of each step."""

    record: ParsedTrajectory
    digest: str
    step_hashes: list[str]


def _hashed_chunks(
    results: Iterable[ParseResult], source_format: str
) -> Iterator[list[_Hashed | RecordError]]:
    """The parser's results, hashed, in chunks of at most IMPORT_CHUNK trajectories or
    CHUNK_STEPS steps (whichever comes first), so memory stays bounded."""
    chunk: list[_Hashed | RecordError] = []
    steps = 0
    for result in results:
        if isinstance(result, RecordError):
            chunk.append(result)
        else:
            try:
                step_hashes = prefix_hashes(result.task, result.steps)
                digest = content_hash(result, source_format, step_hashes=step_hashes)
            except ValueError:  # a lone surrogate cannot be encoded, so cannot be stored
                chunk.append(_unstorable(result))
            else:
                chunk.append(_Hashed(result, digest, step_hashes))
                steps += len(result.steps)
        if len(chunk) >= IMPORT_CHUNK or steps >= CHUNK_STEPS:
            yield chunk
            chunk, steps = [], 0
    if chunk:
        yield chunk


@contextlib.contextmanager
def _read_ahead(chunks: Iterator[list[Any]]) -> Iterator[Iterator[list[Any]]]:
    """``chunks``, produced by a thread one chunk ahead of the caller.

    Parsing and hashing the next chunk overlaps with PostgreSQL writing this one: the
    thread runs whenever the caller waits on the database (the driver releases the GIL
    there), so the server is rarely left idle. The parser's own exceptions (FileError)
    come out of the caller's loop as if there were no thread. Leaving the block early
    stops the thread and closes the parser.
    """
    handoff: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for chunk in chunks:
                if not _offer(handoff, stop, ("chunk", chunk)):
                    return
            _offer(handoff, stop, ("end", None))
        except BaseException as error:  # handed to the caller, raised there
            _offer(handoff, stop, ("error", error))
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def consume() -> Iterator[list[Any]]:
        while True:
            kind, value = handoff.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    thread = threading.Thread(target=produce, name="import-read-ahead", daemon=True)
    thread.start()
    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                handoff.get(timeout=0.05)
        thread.join()


def _offer(handoff: queue.Queue[tuple[str, Any]], stop: threading.Event, item: Any) -> bool:
    """Put ``item`` when there is room; False once the consumer has stopped."""
    while not stop.is_set():
        try:
            handoff.put(item, timeout=0.05)
        except queue.Full:
            continue
        return True
    return False


class _ChunkWriter:
    """Writes chunks of hashed trajectories: new ones with COPY, repeats counted."""

    def __init__(self, batch: ImportBatch, schema: LabelSchema, counts: _Counts) -> None:
        self.batch = batch
        self.project_id = batch.project_id
        self.schema_id = schema.pk
        self.counts = counts
        self.annotators: dict[str, int] = {}
        self.now = timezone.now().isoformat()
        self.trusted_steps = _can_skip_trigger_checks()

    def write(self, records: list[_Hashed]) -> None:
        counts = self.counts
        by_hash: dict[str, _Hashed] = {}
        for item in records:
            by_hash.setdefault(item.digest, item)
        existing = set(
            Trajectory.objects.filter(
                project_id=self.project_id, content_hash__in=list(by_hash)
            ).values_list("content_hash", flat=True)
        )
        # Repeats within the file and trajectories already in the project are unchanged.
        counts.unchanged += len(records) - len(by_hash) + len(existing)
        new = [item for digest, item in by_hash.items() if digest not in existing]
        if not new:
            return
        for item in new:
            for label in item.record.labels:
                if label.annotator not in self.annotators:
                    self.annotators[label.annotator] = imported_annotator(label.annotator).pk
        trajectory_ids, step_ids = _allocate_ids(
            len(new), sum(len(item.record.steps) for item in new)
        )

        trajectory_rows: list[str] = []
        source_rows: list[str] = []
        label_rows: list[str] = []
        first_step = 0
        # Steps go first and are streamed while the rows are built, so PostgreSQL
        # stores one piece while the next is encoded. Their foreign key to the
        # trajectory is deferred to commit, so the order does not matter to it.
        with self._step_copy() as steps_out:
            for trajectory_id, item in zip(trajectory_ids, new, strict=True):
                count = len(item.record.steps)
                ids = step_ids[first_step : first_step + count]
                first_step += count
                try:
                    rows = self._rows(trajectory_id, ids, item)
                except ValueError:  # NUL or a lone surrogate: PostgreSQL cannot store it
                    counts.errors.append(_unstorable(item.record))
                    continue
                steps_out.write(rows[0])
                trajectory_rows.append(rows[1])
                if rows[2]:
                    source_rows.append(rows[2])
                label_rows.extend(rows[3])
                counts.steps += count
                if item.record.parent_external_id:
                    counts.children.append((trajectory_id, item.record.parent_external_id))
        _copy(f"trajectories_trajectory ({TRAJECTORY_COLUMNS})", trajectory_rows)
        _copy("trajectories_trajectorysource (trajectory_id, location, raw)", source_rows)
        _copy(f"labeling_steplabel ({LABEL_COLUMNS})", label_rows)
        counts.created += len(trajectory_rows)

    def _rows(
        self, trajectory_id: int, step_ids: list[int], item: _Hashed
    ) -> tuple[str, str, str, list[str]]:
        """The record's step rows (one string), trajectory row, source row ("" when
        there is no source record) and label rows. Raises ValueError for text
        PostgreSQL cannot store, before anything of the record is written."""
        record = item.record
        steps = pgcopy.step_rows(trajectory_id, step_ids, record.steps, item.step_hashes)
        trajectory = pgcopy.row(
            (
                trajectory_id, self.project_id, record.external_id, self.batch.source_format,
                record.task_key, record.task, record.ground_truth, record.model_name,
                record.outcome_reward, record.success, pgcopy.Json(record.metadata),
                len(record.steps), item.digest, self.batch.pk, record.branch_index, self.now,
            )
        )  # fmt: skip
        source = ""
        if record.raw is not None:
            source = pgcopy.row((trajectory_id, record.location[:100], pgcopy.Json(record.raw)))
        submitted, now = StepLabel.Status.SUBMITTED.value, self.now
        labels = [
            f"{step_ids[label.step_index]}\t{self.annotators[label.annotator]}\t{self.schema_id}"
            f"\t{int(label.value)}\t[]\t\t{submitted}\tf\t{now}\t{now}\n"
            for label in record.labels
        ]
        return steps, trajectory, source, labels

    @contextlib.contextmanager
    def _step_copy(self) -> Iterator[_Buffered]:
        with connection.cursor() as wrapper:
            cursor = wrapper.cursor
            if self.trusted_steps:
                cursor.execute("SET LOCAL session_replication_role = replica")
            with cursor.copy(f"COPY trajectories_step ({pgcopy.STEP_COLUMNS}) FROM STDIN") as copy:
                buffered = _Buffered(copy.write)
                yield buffered
                buffered.flush()
            # An error above rolls the transaction back, and the setting with it.
            if self.trusted_steps:
                cursor.execute("SET LOCAL session_replication_role = origin")


TRAJECTORY_COLUMNS = (
    "id, project_id, external_id, source_format, task_key, task, ground_truth, model_name,"
    " outcome_reward, success, metadata, step_count, content_hash, import_batch_id,"
    " branch_index, created_at"
)
LABEL_COLUMNS = (
    "step_id, annotator_id, schema_id, value, tags, rationale, status, saw_model_scores,"
    " created_at, updated_at"
)


class _Buffered:
    """Collects COPY text and hands it on in pieces of about ``size`` characters: large
    enough to keep per-call overhead small, small enough to keep the server busy."""

    def __init__(self, write: Callable[[str], Any], size: int = 1 << 20) -> None:
        self._write = write
        self._size = size
        self._pieces: list[str] = []
        self._length = 0

    def write(self, text: str) -> None:
        self._pieces.append(text)
        self._length += len(text)
        if self._length >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            self._write("".join(self._pieces))
            self._pieces, self._length = [], 0


def _can_skip_trigger_checks() -> bool:
    """Whether this connection may turn off trigger checks for its own transaction.

    Steps are written with the ids of trajectories this same transaction wrote, which no
    other transaction can see, let alone delete, before it commits; so the foreign key
    from step to trajectory holds by construction, and checking it row by row (a deferred
    trigger per step, run at commit) took longer than writing the steps. The setting
    turns off every ordinary trigger, and trajectories_step has none but the key's (a
    test in tests/trajectories/test_import_chunks.py fails if one is added). Only
    superusers may set ``session_replication_role``; other roles keep the checks.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser') = 'on'")
        row = cursor.fetchone()
    return bool(row and row[0])


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


def _copy(table_and_columns: str, rows: list[str]) -> None:
    """COPY pre-encoded text rows, sent in pieces of about a megabyte."""
    if not rows:
        return
    with (
        connection.cursor() as wrapper,
        wrapper.cursor.copy(f"COPY {table_and_columns} FROM STDIN") as copy,
    ):
        out = _Buffered(copy.write)
        for row in rows:
            out.write(row)
        out.flush()


def _allocate_ids(trajectories: int, steps: int) -> tuple[list[int], list[int]]:
    """Take ids from the trajectory and step identity sequences, so rows written with
    COPY can reference each other (steps their trajectory, labels their step)."""
    with connection.cursor() as cursor:
        # The sequences are looked up once: calling pg_get_serial_sequence for every
        # id made taking them cost as much as writing the steps' heap.
        cursor.execute(
            "SELECT pg_get_serial_sequence(%s, 'id')::regclass::oid,"
            " pg_get_serial_sequence(%s, 'id')::regclass::oid",
            [Trajectory._meta.db_table, Step._meta.db_table],
        )
        sequences = cursor.fetchone()
        assert sequences is not None
        cursor.execute(
            "SELECT ARRAY(SELECT nextval(%s::oid) FROM generate_series(1, %s)),"
            " ARRAY(SELECT nextval(%s::oid) FROM generate_series(1, %s))",
            [sequences[0], trajectories, sequences[1], steps],
        )
        row = cursor.fetchone()
    assert row is not None
    return list(row[0]), list(row[1])
