"""The bulk writer an import's prepared chunks go through (trajectories.prepare): new
trajectories and their steps with ``COPY``, repeats found by content hash and counted,
labels handed to the app that registered a writer for them. It runs inside the import's
transaction (``trajectories.services.imports``), so what it writes stays all or nothing."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, AnyStr, Generic

from django.db import connection
from django.utils import timezone

from trajectories import pgcopy, prepare
from trajectories.digests import DigestFilter
from trajectories.formats.base import RecordError
from trajectories.models import ImportBatch, Project, Trajectory
from trajectories.services.projects import imported_annotator

# Trajectory rows held back to be written in one COPY (a few MB at most).
PENDING_TRAJECTORIES = 5000
# Trajectory ids taken at a time after an import's first chunk.
ID_BLOCK = 5000
# Step rows go to PostgreSQL in pieces of about this size, so that it stores them while
# this process prepares the next ones; at 1 MB a push's first piece left after half of
# its steps were prepared, and PostgreSQL idle until then (`bench/push.py`).
STEP_PIECE_BYTES = 64 * 1024


@dataclasses.dataclass
class Counts:
    """What an import has done so far."""

    created: int = 0
    unchanged: int = 0
    steps: int = 0
    errors: list[RecordError] = dataclasses.field(default_factory=list)
    # (new trajectory id, its parent's external id) for rollouts that continue another.
    children: list[tuple[int, str]] = dataclasses.field(default_factory=list)


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


class ChunkWriter:
    """Writes chunks of prepared trajectories: new ones with COPY, repeats counted."""

    def __init__(self, batch: ImportBatch, counts: Counts, expected: int = 0) -> None:
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
        self.sequence = trajectory_sequence()
        self.trusted = can_skip_trigger_checks()
        # Into a project with no trajectories yet (under the lock above, none can
        # arrive), a digest can only be a repeat of one this import wrote, and the
        # filter says which can be: the rest need no probe of the database.
        self.written: DigestFilter | None = (
            None
            if Trajectory.objects.filter(project_id=batch.project_id).exists()
            else DigestFilter()
        )
        # Into a project that has trajectories, the first chunk is asked about before
        # its steps are written. If none of it is a repeat, later chunks that write only
        # steps and trajectory rows (see _writes_more) are written unasked, and asked
        # about all at once just before their trajectory rows are written
        # (:meth:`_unasked_check`): asking ends the step COPY, and asking once a chunk
        # left PostgreSQL idle while this process prepared the next one. None: not asked
        # yet; False once a repeat was found.
        self.ask_later: bool | None = None
        # Digests written unasked: (trajectory id, step count) of each.
        self.unasked: dict[str, tuple[int, int]] = {}
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
        self.pending_rows: dict[int, str] = {}  # by trajectory id
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
        # database is asked about the rest (only those the filter may hold, if any),
        # now or, once the first chunk had no repeat, before their rows are written.
        unheld = [d for d in by_hash if d not in self.pending_digests]
        written = self.written
        candidates = unheld if written is None else [d for d in unheld if d in written]
        unasked = bool(candidates) and self.ask_later is True and not _writes_more(records)
        existing: set[str] = set()
        if candidates and not unasked:
            self._steps_close()
            existing = existing_hashes(self.project_id, candidates)
            if written is None and self.ask_later is None:
                self.ask_later = not existing
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
            self.pending_rows[trajectory_id] = f"{trajectory_id}{self.head}{item.fields}"
            self.pending_digests.add(item.digest)
            if unasked:
                self.unasked[item.digest] = (trajectory_id, item.step_count)
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
            self._trajectories_flush()

    def finish(self) -> None:
        """Write everything still open or waiting and turn the checks back on: after
        it, the database holds all written so far, as ordinary SQL sees it."""
        self._trajectories_flush()
        self._checks_on()

    def __enter__(self) -> ChunkWriter:
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
            self.ids += ids_allocate(self.sequence, block)
            self.ids_blocks = True
        taken, self.ids = self.ids[:count], self.ids[count:]
        return taken

    def _trajectories_flush(self) -> None:
        self._steps_close()
        self._unasked_check()
        _copy(f"trajectories_trajectory ({TRAJECTORY_COLUMNS})", list(self.pending_rows.values()))
        self.pending_rows, self.pending_digests = {}, set()

    def _unasked_check(self) -> None:
        """Ask about the trajectories written unasked, in one probe, and take back those
        the project had already: their steps deleted, their rows never written, and
        each chunk asked about from here on (repeats are arriving)."""
        if not self.unasked:
            return
        unasked, self.unasked = self.unasked, {}
        existing = existing_hashes(self.project_id, list(unasked))
        if not existing:
            return
        self.ask_later = False
        repeats = [unasked[digest] for digest in existing]
        dropped = {trajectory_id for trajectory_id, _ in repeats}
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM trajectories_step WHERE trajectory_id = ANY(%s)", [list(dropped)]
            )
        for trajectory_id in dropped:
            del self.pending_rows[trajectory_id]
        counts = self.counts
        counts.created -= len(repeats)
        counts.unchanged += len(repeats)
        counts.steps -= sum(step_count for _, step_count in repeats)

    def _checks_off(self) -> None:
        """Foreign-key checks off for the rows written from here (see
        :func:`can_skip_trigger_checks`), where this connection may turn them off. An
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


def _writes_more(records: list[prepare.Prepared]) -> bool:
    """Whether any of the records writes more than its steps and trajectory row (labels,
    a verdict, a source record, a link to its parent): what the writer does not take
    back when a record written unasked turns out to be a repeat."""
    return any(
        item.labels
        or item.first_error_index is not None
        or item.decisive is not None
        or item.source
        or item.parent_external_id
        for item in records
    )


def existing_hashes(project_id: int, digests: list[str]) -> set[str]:
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


def can_skip_trigger_checks() -> bool:
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


def link_parents(project_id: int, children: list[tuple[int, str]]) -> None:
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


def parents_set(links: list[tuple[int, int]]) -> None:
    """Point each child trajectory at the exact parent given, ``(child_id, parent_id)``,
    where external ids cannot say which (they need not be unique, or may be blank)."""
    if not links:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE trajectories_trajectory AS t SET parent_id = link.parent_id"
            " FROM unnest(%s::bigint[], %s::bigint[]) AS link(child_id, parent_id)"
            " WHERE t.id = link.child_id AND t.parent_id IS DISTINCT FROM link.parent_id",
            [[child for child, _ in links], [parent for _, parent in links]],
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


def trajectory_sequence() -> str:
    """The trajectory identity sequence, looked up once per import: calling
    pg_get_serial_sequence for every id costs more than taking the ids."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [Trajectory._meta.db_table])
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def ids_allocate(sequence: str, count: int) -> list[int]:
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
