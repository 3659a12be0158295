"""Imports: a file (or an API push) parsed by a Django-free parser and written in bulk
with ``COPY`` in one all-or-nothing transaction."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, AnyStr, Generic

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import UploadedFile
from django.db import connection, transaction
from django.utils import timezone

from stepscope import locks
from stepscope.jobs.lifecycle import job_cancel
from stepscope.queueing import broker_require
from trajectories import pgcopy, prepare
from trajectories.digests import DigestFilter
from trajectories.formats import parser_for, stepscope
from trajectories.formats.base import FileError, Parser, RecordError
from trajectories.formats.stepscope_typed import TypedRecords
from trajectories.models import ImportBatch, Project, Trajectory
from trajectories.services.progress import ProgressWriter
from trajectories.services.projects import imported_annotator
from trajectories.services.search import search_index_enqueue

# Errors kept on a batch; the count of all of them is kept too.
MAX_ERRORS_KEPT = 1000
# Trajectory rows held back to be written in one COPY (a few MB at most).
PENDING_TRAJECTORIES = 5000
# Trajectory ids taken at a time after an import's first chunk.
ID_BLOCK = 5000
# Step rows go to PostgreSQL in pieces of about this size, so that it stores them while
# this process prepares the next ones; at 1 MB a push's first piece left after half of
# its steps were prepared, and PostgreSQL idle until then (`bench/push.py`).
STEP_PIECE_BYTES = 64 * 1024
# A push is prepared in this process, in chunks that start this many steps long and
# double up to prepare.CHUNK_STEPS: the first reaches PostgreSQL sooner than one of
# CHUNK_STEPS would, and a project that has trajectories already is asked for repeats
# (which ends the step COPY) once a chunk, so the chunks stay few.
PUSH_FIRST_CHUNK_STEPS = 1000


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
    return parser_for(source_format, mapping)


def trajectory_import(
    *,
    project: Project,
    source_format: str,
    path: Path,
    user: User | None = None,
    skip_invalid: bool = False,
    mapping: dict[str, Any] | None = None,
    internal: bool = False,
) -> ImportBatch:
    """Import one file into ``project``, in this process. ``internal`` marks a batch an
    app's own job writes (a rollout job's continuations), kept out of the list of imports.

    Re-importing a trajectory already present (same content hash) changes nothing. By
    default the import is all-or-nothing: if any record is malformed, nothing from the
    file is written, the batch is saved as failed with every error (location and field),
    and :class:`ImportRejected` is raised. With ``skip_invalid`` the good records are
    written and the bad ones reported.
    """
    parser_get(source_format, mapping)  # a bad format or mapping is said before any batch
    batch = ImportBatch.objects.create(
        project=project,
        file_name=path.name,
        source_format=source_format,
        created_by=user,
        mapping=mapping,
        skip_invalid=skip_invalid,
        file_size=_size(path),
        internal=internal,
    )
    _import_into(batch, lambda: prepare.file_chunks(path, batch.source_format, batch.mapping))
    return _finished(batch)


def _finished(batch: ImportBatch) -> ImportBatch:
    if batch.status == ImportBatch.Status.FAILED:
        raise ImportRejected(batch)
    if batch.created_count:
        # The search index is built afterwards, off the import's path (trajectories.search).
        project_id = batch.project_id
        transaction.on_commit(lambda: search_index_enqueue(project_id))
    return batch


def _size(path: Path) -> int:
    """A file's size, or a folder's (an OpenHands conversation): its files' together."""
    if path.is_dir():
        return sum(part.stat().st_size for part in path.rglob("*") if part.is_file())
    return path.stat().st_size


def trajectory_records_import(
    *,
    project: Project,
    records: list[Any] | TypedRecords,
    user: User | None = None,
    skip_invalid: bool = False,
) -> ImportBatch:
    """Import trajectories given as Stepscope-format records (an API push), at once: the
    records already read are checked and prepared in this process (no file, no second
    parse) and written by the same bulk writer as a file, all or nothing. Errors name a
    record by its index in the list (``record 3``) and the field. Records the typed
    reader decoded (:mod:`trajectories.formats.stepscope_typed`) are checked already."""
    batch = ImportBatch.objects.create(
        project=project,
        file_name="api-push",
        source_format="stepscope",
        created_by=user,
        skip_invalid=skip_invalid,
    )
    chunks = prepare.prepared_chunks(
        records.parsed() if isinstance(records, TypedRecords) else stepscope.parse_records(records),
        "stepscope",
        trajectories=prepare.CHUNK_TRAJECTORIES,
        steps=prepare.CHUNK_STEPS,
        size=prepare.CHUNK_BYTES,
        first_steps=PUSH_FIRST_CHUNK_STEPS,
    )
    # A push is over in well under a second: no progress figure (nor its connection) then.
    _import_into(
        batch, lambda: contextlib.nullcontext(chunks), progress_after=1.0, expected=len(records)
    )
    return _finished(batch)


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


def import_batch_cancel(*, batch: ImportBatch) -> ImportBatch:
    """Stop a queued or running import: nothing of it stays (it is one transaction)."""
    return job_cancel(batch)


def import_batch_run(*, batch_id: int) -> ImportBatch:
    """Run a queued import (the Celery task's body). Safe to run again after a worker
    died: the import is one transaction, so a rerun starts from a clean slate, and a
    finished batch is left as it is."""
    with transaction.atomic():
        batch = ImportBatch.objects.select_for_update().get(pk=batch_id)
        if not batch.is_active:
            if batch.status == ImportBatch.Status.CANCELLED and batch.stored_path:
                # Cancelled before a worker took it: its upload is not needed any more.
                shutil.rmtree(Path(batch.stored_path).parent, ignore_errors=True)
            return batch
        batch.status = ImportBatch.Status.RUNNING
        batch.save(update_fields=["status"])
    path = Path(batch.stored_path)
    problem = None
    try:
        parser_get(batch.source_format, batch.mapping)
    except ValueError as error:
        problem = RecordError(location="file", field="", message=str(error))
    if problem is None and not path.is_file():
        problem = RecordError(location="file", field="", message="the uploaded file is gone")
    if problem is not None:
        batch.refresh_from_db()
        if batch.status in (ImportBatch.Status.DONE, ImportBatch.Status.FAILED):
            return batch  # another delivery of this task finished it meanwhile
        batch.status = ImportBatch.Status.FAILED
        batch.errors = [dataclasses.asdict(problem)]
        batch.rejected_count = 1
        batch.finished_at = timezone.now()
        batch.save()
        return batch
    _import_into(batch, lambda: prepare.file_chunks(path, batch.source_format, batch.mapping))
    shutil.rmtree(path.parent, ignore_errors=True)
    return batch


# Opens the prepared chunks of what an import reads (a file, or records already read).
ChunkSource = Callable[[], contextlib.AbstractContextManager[Iterator[prepare.Chunk]]]


def _import_into(
    batch: ImportBatch, source: ChunkSource, progress_after: float = 0.0, expected: int = 0
) -> None:
    """Import the chunks of ``source`` into the batch's project, all or nothing.
    ``expected``: how many records there are, where that is known (a push), so that the
    trajectory ids are taken at once."""
    counts = _Counts()
    skip_invalid = batch.skip_invalid
    file_failed = False
    progress = ProgressWriter(
        "trajectories_importbatch", batch.pk, "processed_count", first_after=progress_after
    )
    try:
        with transaction.atomic():
            # One import per project at a time: the content-hash check and the COPY
            # must not interleave with another import of the same rows.
            locks.xact_lock(locks.LockClass.IMPORT, batch.project_id)
            # A task handed out twice (it ran past the broker's visibility timeout) waits
            # above while the first run finishes; then there is nothing left to do.
            # Or it was cancelled meanwhile.
            if not ImportBatch.objects.filter(pk=batch.pk, status__in=ImportBatch.ACTIVE).exists():
                raise _AlreadyFinished
            with (
                _ChunkWriter(batch, counts, expected) as writer,
                source() as chunks,
            ):
                for chunk in chunks:
                    # A cancel is seen within about a second (when progress is written),
                    # and rolls back everything this import wrote.
                    if progress.report(len(chunk)) and progress.status() == "cancelled":
                        raise _AlreadyFinished
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
                writer.finish()
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
    """Another run of the same batch finished while this one waited for the lock, or the
    batch was cancelled."""


class _Rollback(Exception):
    pass


# Where the labels that come with imported records go. Labels are labeling's: it registers
# its writer from LabelingConfig.ready() (labeling/imported.py). The writer is made once per
# import, for its project, and its two parts are called after the trajectories are written:
# ``steps`` with one row per step label (trajectory ids, step indexes, annotator user ids,
# values), ``verdicts`` with one row per trajectory-level first error (trajectory ids,
# annotator user ids, first error indexes, -1 where no step is wrong), ``decisive`` with
# one row per decisive failure (trajectory ids, annotator user ids, agents, step indexes
# or None, reasons), after the verdicts.
StepLabelRows = Callable[[list[int], list[int], list[int], list[int]], None]
VerdictRows = Callable[[list[int], list[int], list[int]], None]
DecisiveRows = Callable[[list[int], list[int], list[str], list[int | None], list[str]], None]


@dataclasses.dataclass(frozen=True)
class ImportedLabels:
    steps: StepLabelRows
    verdicts: VerdictRows
    decisive: DecisiveRows


LabelWriter = Callable[[Project], ImportedLabels]
_LABEL_WRITERS: list[LabelWriter] = []  # labeling's, once it registers


def imported_labels_writer_register(writer: LabelWriter) -> LabelWriter:
    _LABEL_WRITERS[:] = [writer]
    return writer


def _labels_refused(*rows: list[Any]) -> None:
    raise RuntimeError("records carry labels, and no app registered a label writer")


_LABELS_REFUSED = ImportedLabels(
    steps=_labels_refused, verdicts=_labels_refused, decisive=_labels_refused
)


class _ChunkWriter:
    """Writes chunks of prepared trajectories: new ones with COPY, repeats counted."""

    def __init__(self, batch: ImportBatch, counts: _Counts, expected: int = 0) -> None:
        self.project_id = batch.project_id
        self.labels_writer = _LABEL_WRITERS[0](batch.project) if _LABEL_WRITERS else _LABELS_REFUSED
        self.counts = counts
        self.annotators: dict[str, int] = {}
        # A record's first error is the verdict of the import's own annotator
        # (``import:<format>``, the one a label without an annotator belongs to).
        self.verdict_annotator = batch.source_format
        self.now = timezone.now().isoformat()
        # The trajectory row's columns between its id and the prepared fields.
        self.head = (
            f"\t{batch.project_id}\t{batch.pk}\t{pgcopy.text(batch.source_format)}\t{self.now}\t"
        )
        self.sequence = _trajectory_sequence()
        self.trusted = _can_skip_trigger_checks()
        # Into a project with no trajectories yet (under the lock above, none can
        # arrive), a digest can only be a repeat of one this import wrote, and the
        # filter says which can be: the rest need no probe of the database.
        self.written: DigestFilter | None = (
            None
            if Trajectory.objects.filter(project_id=batch.project_id).exists()
            else DigestFilter()
        )
        self.checks_off = False
        # The step COPY stays open from chunk to chunk while nothing else needs the
        # connection, so PostgreSQL stores one chunk while the next arrives; trajectory
        # ids are taken in blocks for the same reason (the first block is exact, so a
        # small import leaves no gap; a push's is as many as it has records, so taking
        # more never closes the COPY).
        self.steps_open = contextlib.ExitStack()
        self.steps_out: _Buffered[bytes] | None = None
        self.ids: list[int] = []
        self.ids_blocks = False
        self.expected = expected
        # Trajectory rows are written a few thousand at a time rather than with every
        # chunk: one COPY statement costs the same round trips for 200 rows or 5,000.
        self.pending_rows: list[str] = []
        self.pending_digests: set[str] = set()
        if self.trusted:
            # What the skipped foreign-key checks would have locked, once: neither the
            # project nor the batch can be deleted before this transaction ends.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM trajectories_project WHERE id = %s FOR KEY SHARE",
                    [batch.project_id],
                )
                cursor.execute(
                    "SELECT 1 FROM trajectories_importbatch WHERE id = %s FOR KEY SHARE",
                    [batch.pk],
                )

    def write(self, records: list[prepare.Prepared]) -> None:
        counts = self.counts
        by_hash: dict[str, prepare.Prepared] = {}
        for item in records:
            by_hash.setdefault(item.digest, item)
        # Repeats of trajectories still waiting to be written are found here; the
        # database is asked about the rest (only those the filter may hold, if any).
        unheld = [d for d in by_hash if d not in self.pending_digests]
        written = self.written
        candidates = unheld if written is None else [d for d in unheld if d in written]
        existing: set[str] = set()
        if candidates:
            self._steps_close()
            existing = _existing_hashes(self.project_id, candidates)
        new = [by_hash[digest] for digest in unheld if digest not in existing]
        # Repeats within the file and trajectories already in the project are unchanged.
        counts.unchanged += len(records) - len(new)
        if not new:
            return
        for item in new:
            names = [annotator for _, annotator, _ in item.labels]
            if item.first_error_index is not None or item.decisive is not None:
                names.append(self.verdict_annotator)
            for annotator in names:
                if annotator not in self.annotators:
                    self._steps_close()
                    self.annotators[annotator] = imported_annotator(annotator).pk
        trajectory_ids = self._ids_take(len(new))

        source_rows: list[str] = []
        labels: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        verdicts: tuple[list[int], list[int], list[int]] = ([], [], [])
        decisive: tuple[list[int], list[int], list[str], list[int | None], list[str]] = (
            [],
            [],
            [],
            [],
            [],
        )
        # Steps are streamed while the rows are built. Their foreign key to the
        # trajectory is deferred to commit (or not checked), so the trajectories may
        # follow later.
        steps_out = self._steps_open()
        for trajectory_id, item in zip(trajectory_ids, new, strict=True):
            steps_out.write(pgcopy.first_column_filled(item.steps, trajectory_id))
            self.pending_rows.append(f"{trajectory_id}{self.head}{item.fields}")
            self.pending_digests.add(item.digest)
            if written is not None:
                written.add(item.digest)
            if item.source:
                source_rows.append(f"{trajectory_id}\t{item.source}")
            for index, annotator, value in item.labels:
                labels[0].append(trajectory_id)
                labels[1].append(index)
                labels[2].append(self.annotators[annotator])
                labels[3].append(value)
            if item.first_error_index is not None:
                verdicts[0].append(trajectory_id)
                verdicts[1].append(self.annotators[self.verdict_annotator])
                verdicts[2].append(item.first_error_index)
            if item.decisive is not None:
                decisive[0].append(trajectory_id)
                decisive[1].append(self.annotators[self.verdict_annotator])
                decisive[2].append(item.decisive[0])
                decisive[3].append(item.decisive[1])
                decisive[4].append(item.decisive[2])
            counts.steps += item.step_count
            if item.parent_external_id:
                counts.children.append((trajectory_id, item.parent_external_id))
        counts.created += len(new)
        if source_rows:
            self._steps_close()
            _copy("trajectories_trajectorysource (trajectory_id, location, raw)", source_rows)
        if labels[0] or verdicts[0] or decisive[0]:
            # With the checks back on: the labels' triggers keep each step's majority.
            self.finish()
            if labels[0]:
                self.labels_writer.steps(*labels)
            if verdicts[0]:
                self.labels_writer.verdicts(*verdicts)
            if decisive[0]:
                self.labels_writer.decisive(*decisive)
        elif len(self.pending_rows) >= PENDING_TRAJECTORIES:
            self._steps_close()
            self._trajectories_flush()

    def finish(self) -> None:
        """Write everything still open or waiting and turn the checks back on: after
        it, the database holds all written so far, as ordinary SQL sees it."""
        self._steps_close()
        self._trajectories_flush()
        self._checks_on()

    def __enter__(self) -> _ChunkWriter:
        return self

    def __exit__(self, *error: Any) -> None:
        # On an error, an open COPY is ended as failed, which leaves the connection
        # ready for the rollback.
        self.steps_open.__exit__(*error)

    def _steps_open(self) -> _Buffered[bytes]:
        if self.steps_out is None:
            self._checks_off()
            wrapper = self.steps_open.enter_context(connection.cursor())
            copy = self.steps_open.enter_context(
                wrapper.cursor.copy(f"COPY trajectories_step ({pgcopy.STEP_COLUMNS}) FROM STDIN")
            )
            self.steps_out = _Buffered(copy.write, b"", size=STEP_PIECE_BYTES)
        return self.steps_out

    def _steps_close(self) -> None:
        """End the open step COPY, if any, so that the connection can run statements."""
        if self.steps_out is not None:
            self.steps_out.flush()
            self.steps_out = None
            self.steps_open.close()

    def _ids_take(self, count: int) -> list[int]:
        if len(self.ids) < count:
            self._steps_close()
            if self.ids_blocks:
                block = max(count, ID_BLOCK)
            else:
                block = max(count - len(self.ids), self.expected)
            self.ids += _allocate_ids(self.sequence, block)
            self.ids_blocks = True
        taken, self.ids = self.ids[:count], self.ids[count:]
        return taken

    def _trajectories_flush(self) -> None:
        _copy(f"trajectories_trajectory ({TRAJECTORY_COLUMNS})", self.pending_rows)
        self.pending_rows, self.pending_digests = [], set()

    def _checks_off(self) -> None:
        """Foreign-key checks off for the rows written from here (see
        :func:`_can_skip_trigger_checks`), where this connection may turn them off. An
        error rolls the transaction back, and the setting with it."""
        if self.trusted and not self.checks_off:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
            self.checks_off = True

    def _checks_on(self) -> None:
        if self.checks_off:
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = origin")
            self.checks_off = False


def _existing_hashes(project_id: int, digests: list[str]) -> set[str]:
    """Those of ``digests`` that trajectories of the project already have.

    One probe of the (content_hash, project) unique index per digest. Written so the
    planner has no other choice: during a large import the project's statistics still
    say it is empty, and a plan over a project index then scans every trajectory the
    import wrote so far, once per chunk (quadratic: two seconds of a 1M-step import).
    LATERAL with LIMIT keeps one probe per digest, and ``project_id + 0`` keeps the
    project indexes out.
    """
    with connection.cursor() as cursor:
        cursor.execute(EXISTING_HASHES_SQL, [digests, project_id])
        return {digest for (digest,) in cursor.fetchall()}


EXISTING_HASHES_SQL = (
    "SELECT d.digest FROM unnest(%s::varchar[]) AS d(digest)"
    " CROSS JOIN LATERAL (SELECT 1 FROM trajectories_trajectory AS t"
    " WHERE t.content_hash = d.digest AND t.project_id + 0 = %s LIMIT 1) AS hit"
)


TRAJECTORY_COLUMNS = (
    f"id, project_id, import_batch_id, source_format, created_at, {prepare.TRAJECTORY_FIELDS}"
)


class _Buffered(Generic[AnyStr]):
    """Collects COPY text (or its encoding) and hands it on in pieces of about ``size``
    characters: large enough to keep per-call overhead small, small enough to keep the
    server busy."""

    def __init__(self, write: Callable[[AnyStr], Any], empty: AnyStr, size: int = 1 << 20) -> None:
        self._write: Callable[[AnyStr], Any] = write
        self._empty: AnyStr = empty
        self._size = size
        self._pieces: list[AnyStr] = []
        self._length = 0

    def write(self, text: AnyStr) -> None:
        self._pieces.append(text)
        self._length += len(text)
        if self._length >= self._size:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            self._write(self._empty.join(self._pieces))
            self._pieces, self._length = [], 0


def _can_skip_trigger_checks() -> bool:
    """Whether this connection may turn off trigger checks for its own transaction.

    An import's rows point at rows whose existence it guarantees: steps and source
    records at trajectories this same transaction wrote, which no other transaction can
    see, let alone delete, before it commits; trajectories at the project and batch,
    which the writer locks (FOR KEY SHARE, as each check would) until commit. So the
    foreign keys hold by construction, and checking them row by row (a deferred trigger
    per row, run at commit) took longer than writing the rows. The setting turns off
    every ordinary trigger, and these three tables have none but their keys' (a test in
    tests/trajectories/test_import_chunks.py fails if one is added). Superusers may set
    ``session_replication_role``, and from PostgreSQL 15 so may a role granted it
    (``GRANT SET ON PARAMETER session_replication_role TO stepscope``, docs/operating.md);
    other roles keep the checks.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('is_superuser') = 'on',"
            " current_setting('server_version_num')::int >= 150000"
        )
        superuser, grants_parameters = cursor.fetchone() or (False, False)
        if superuser or not grants_parameters:  # no privileges on parameters before 15
            return bool(superuser)
        cursor.execute("SELECT has_parameter_privilege('session_replication_role', 'SET')")
        row = cursor.fetchone()
    return bool(row and row[0])


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
        out = _Buffered(copy.write, "")
        for row in rows:
            out.write(row)
        out.flush()


def _trajectory_sequence() -> str:
    """The trajectory identity sequence, looked up once per import: calling
    pg_get_serial_sequence for every id costs more than taking the ids."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [Trajectory._meta.db_table])
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def _allocate_ids(sequence: str, count: int) -> list[int]:
    """Take ids from the trajectory identity sequence, so the rows written with COPY
    (steps, sources) can point at their trajectory."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ARRAY(SELECT nextval(%s::regclass) FROM generate_series(1, %s))",
            [sequence, count],
        )
        row = cursor.fetchone()
    assert row is not None
    return list(row[0])
