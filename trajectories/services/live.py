"""Traces that arrive live over OTLP: accepting spans, and assembling them into trajectories.

Accepting (:func:`live_spans_accept`, the receiver's whole write) stages the spans, three
statements in one transaction: the traces' ``LiveTrace`` rows are made or locked, the
spans go in with one ``INSERT ... SELECT FROM unnest`` that skips spans already staged (an
exporter's retry changes nothing), and the traces' counts move on. Nothing else happens
on the request's path; once it commits, the spans are kept.

Assembling (:func:`live_traces_assemble`, a Celery task) takes the pending traces (more
spans staged than assembled), a batch at a time, each under its advisory lock, reads all
of a trace's staged spans and maps them with the ``otel`` importer's own code
(``otel.span_record`` and ``otel.trace_trajectory``). The first time a trace is assembled
its trajectory is made; later, the trajectory is brought up to date in place. Steps are
matched by span id, so a step keeps its row (and the labels, scores and history on it)
while the trace grows around it; only changed steps are written.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from stepscope.locks import LockClass
from stepscope.queueing import QueueUnavailable, send_if_up
from trajectories import pgcopy
from trajectories.formats import otel
from trajectories.formats.base import FieldError, ParsedStep
from trajectories.formats.otlp import WireSpan
from trajectories.formats.spans import Span
from trajectories.hashing import prefix_hashes
from trajectories.models import LiveAssembly, LiveTrace, Trajectory

logger = logging.getLogger(__name__)

SOURCE_FORMAT = "otel"
# Traces assembled per transaction, and batches per task (a task with more left queues
# the next one rather than holding a worker for long).
ASSEMBLE_BATCH = 200
ASSEMBLE_BATCHES = 25
# Added to a trajectory's step indexes while its steps are put in their new order, so no
# two steps ever hold one index (the unique index is checked row by row).
INDEX_SHIFT = 1_000_000_000
# Seconds between the search-index tasks the assembler queues for one project.
SEARCH_EVERY = 5.0
# Step rows per statement, so a large trace's rows never make one huge query.
WRITE_ROWS = 5000


@dataclass
class Accepted:
    """What one request's spans came to."""

    stored: int = 0
    duplicates: int = 0
    # "span <id> of trace <id>: why", for the answer's partialSuccess.
    rejected: list[str] = field(default_factory=list)


# Accepting


def live_spans_accept(*, project_id: int, spans: Sequence[WireSpan]) -> Accepted:
    """Stage ``spans`` of one project. Spans over the per-trace cap are rejected (and
    named); spans already staged are counted as duplicates. Queues the assembler once
    the spans are committed."""
    accepted = Accepted()
    if not spans:
        return accepted
    limit = settings.STEPSCOPE_OTLP_MAX_SPANS_PER_TRACE
    trace_ids = sorted({span.trace_id for span in spans})
    with transaction.atomic(), connection.cursor() as cursor:
        # Made, or locked (in one order, so two requests never wait on each other in a
        # circle): the per-trace cap below is exact under concurrent requests.
        cursor.execute(
            "INSERT INTO trajectories_livetrace (project_id, trace_id)"
            " SELECT %s, t FROM unnest(%s::text[]) AS t ORDER BY t"
            " ON CONFLICT (project_id, trace_id)"
            " DO UPDATE SET span_count = trajectories_livetrace.span_count"
            " RETURNING trace_id, span_count",
            [project_id, trace_ids],
        )
        room = {trace_id: limit - count for trace_id, count in cursor.fetchall()}
        kept: list[WireSpan] = []
        texts: list[str] = []
        for span in spans:
            text = _record_text(span.record)
            if text is None:
                accepted.rejected.append(
                    f"span {span.span_id} of trace {span.trace_id}: contains a NUL character"
                    " or invalid Unicode, which PostgreSQL cannot store"
                )
                continue
            if room[span.trace_id] <= 0:
                accepted.rejected.append(
                    f"span {span.span_id} of trace {span.trace_id}: the trace has reached"
                    f" {limit} spans (STEPSCOPE_OTLP_MAX_SPANS_PER_TRACE)"
                )
                continue
            room[span.trace_id] -= 1
            kept.append(span)
            texts.append(text)
        if not kept:
            return accepted
        cursor.execute(
            "INSERT INTO trajectories_stagedspan (project_id, trace_id, span_id, record)"
            " SELECT %s, u->>0, u->>1, (u->2)::jsonb FROM json_array_elements(%s::json) AS u"
            " ON CONFLICT (project_id, trace_id, span_id) DO NOTHING"
            " RETURNING trace_id, span_id",
            # One JSON document, not arrays of text: psycopg escapes each element of a
            # text array with a regular expression, one string it escapes in C.
            [
                project_id,
                "["
                + ",".join(
                    f'["{span.trace_id}","{span.span_id}",{text}]'
                    for span, text in zip(kept, texts, strict=True)
                )
                + "]",
            ],
        )
        stored = cursor.fetchall()
        accepted.stored = len(stored)
        accepted.duplicates = len(kept) - len(stored)
        if stored:
            roots = {(span.trace_id, span.span_id) for span in kept if not span.parent_span_id}
            counts = Counter(trace_id for trace_id, _ in stored)
            with_root = {trace_id for trace_id, span_id in stored if (trace_id, span_id) in roots}
            grown = sorted(counts)
            cursor.execute(
                "UPDATE trajectories_livetrace l SET span_count = l.span_count + u.n,"
                " root_seen = l.root_seen OR u.root, last_span_at = now()"
                " FROM unnest(%s::text[], %s::int[], %s::bool[]) AS u(t, n, root)"
                " WHERE l.project_id = %s AND l.trace_id = u.t",
                [grown, [counts[t] for t in grown], [t in with_root for t in grown], project_id],
            )
            transaction.on_commit(assembly_request)
    return accepted


def _record_text(record: dict[str, Any]) -> str | None:
    """The record as JSON text for its jsonb column, or None where jsonb cannot hold it
    (a NUL character, a lone surrogate)."""
    try:
        text = orjson.dumps(record).decode()
    except orjson.JSONEncodeError:
        return None
    return None if "\\u0000" in text else text


def backlog() -> int:
    """Spans staged and not yet assembled, over all projects (the receiver sheds load
    past ``STEPSCOPE_OTLP_MAX_BACKLOG``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(span_count - assembled_count), 0) FROM trajectories_livetrace"
            " WHERE span_count > assembled_count"
        )
        return int(cursor.fetchone()[0])


def assembly_request() -> bool:
    """Queue the assembler unless a task is queued and has not started (it will take
    these spans too). Whether a task was queued."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO trajectories_liveassembly (id, queued_at) VALUES (1, clock_timestamp())"
            " ON CONFLICT (id) DO UPDATE SET queued_at = clock_timestamp()"
            " WHERE trajectories_liveassembly.queued_at IS NULL"
            f" OR trajectories_liveassembly.queued_at < clock_timestamp() - interval"
            f" '{LiveAssembly.STALE_SECONDS} seconds'"
            " RETURNING 1"
        )
        if cursor.fetchone() is None:
            return False
    from trajectories.tasks import live_assemble

    delay = settings.STEPSCOPE_OTLP_ASSEMBLE_DELAY_MS / 1000
    try:
        live_assemble.apply_async(countdown=delay)
    except Exception as error:  # the broker is down: the sweep queues it later
        LiveAssembly.objects.filter(pk=1).update(queued_at=None)
        logger.warning("live trace assembly not queued: %s", error)
        return False
    return True


def live_sweep() -> bool:
    """Queue the assembler if traces are pending and no task is queued (the periodic
    sweep: a task lost with its worker and broker message is replaced)."""
    if not LiveTrace.objects.filter(span_count__gt=F("assembled_count")).exists():
        return False
    return assembly_request()


# Assembling


@dataclass
class _Trace:
    live_id: int
    project_id: int
    trace_id: str
    trajectory_id: int | None
    # The staged spans, mapped as they are read (the records are not kept: a trace of
    # 100,000 spans would hold them all), the ones the mapping refused, and how many.
    spans: list[Span] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    resource: dict[str, Any] = field(default_factory=dict)
    count: int = 0

    def add(self, record: dict[str, Any]) -> None:
        try:
            _, span = otel.span_record(record, "")
        except FieldError as error:
            field_name, message = error.field, error.message
            self.errors.append(
                {"span_id": str(record.get("spanId")), "field": field_name, "message": message}
            )
        else:
            span.order = self.count
            span.raw = None
            self.spans.append(span)
            if not self.resource and isinstance(record.get("resource"), dict):
                self.resource = record["resource"]
        self.count += 1


def live_traces_assemble(*, batch: int = ASSEMBLE_BATCH, batches: int = ASSEMBLE_BATCHES) -> int:
    """Assemble pending traces, ``batch`` per transaction, until none is left that
    another assembler is not holding (or ``batches`` were done: then a new task is
    queued). Returns how many traces were assembled."""
    LiveAssembly.objects.filter(pk=1).update(queued_at=None)
    assembled = 0
    skipped: list[int] = []
    projects: set[int] = set()
    for _ in range(batches):
        with transaction.atomic():
            traces = _pending_take(batch, skipped)
            if traces is None:
                break
            if traces:
                _assemble(traces)
                assembled += len(traces)
                projects.update(trace.project_id for trace in traces)
    else:
        send_if_up(_task(), what="live trace assembly (more pending)")
    for project_id in sorted(projects):
        _search_index_later(project_id)
    return assembled


# When this process's next search-index task of each project is due (monotonic clock).
_SEARCH_DUE: dict[int, float] = {}


def _search_index_later(project_id: int) -> None:
    """Index the project's new and grown trajectories ``SEARCH_EVERY`` seconds from now,
    unless a task queued by this process is still to come (it will take these too).
    Each index task looks over the project for trajectories without documents; one per
    assembly made that scan, many times a second, most of PostgreSQL's work under a
    steady stream of spans. Until indexed, trajectories are searched by their text."""
    now = time.monotonic()
    if _SEARCH_DUE.get(project_id, 0.0) > now:
        return
    from trajectories.tasks import search_index

    try:
        search_index.apply_async((project_id,), countdown=SEARCH_EVERY)
    except QueueUnavailable as error:
        logger.warning("search index of project %s not queued: %s", project_id, error)
        return
    _SEARCH_DUE[project_id] = now + SEARCH_EVERY


def _task() -> Any:
    from trajectories.tasks import live_assemble

    return live_assemble


def _pending_take(batch: int, skipped: list[int]) -> list[_Trace] | None:
    """Up to ``batch`` pending traces, each locked for this transaction; None when no
    pending trace is left but those other assemblers hold (listed in ``skipped``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, project_id, trace_id, trajectory_id FROM trajectories_livetrace"
            " WHERE span_count > assembled_count AND NOT (id = ANY(%s))"
            " ORDER BY last_span_at LIMIT %s",
            [skipped, batch],
        )
        candidates = cursor.fetchall()
        if not candidates:
            return None
        cursor.execute(
            "SELECT id FROM unnest(%s::bigint[]) AS id"
            " WHERE pg_try_advisory_xact_lock(%s, id::int)",
            [[row[0] for row in candidates], int(LockClass.LIVE_TRACE)],
        )
        locked = {row[0] for row in cursor.fetchall()}
        skipped.extend(row[0] for row in candidates if row[0] not in locked)
        traces = {
            (project_id, trace_id): _Trace(live_id, project_id, trace_id, trajectory_id)
            for live_id, project_id, trace_id, trajectory_id in candidates
            if live_id in locked
        }
        if not traces:
            return []
        # The trajectory may have been made by an assembler that committed after the
        # list above was read; read it again under the lock.
        keys = list(traces)
        cursor.execute(
            "SELECT project_id, trace_id, trajectory_id FROM trajectories_livetrace"
            " WHERE id = ANY(%s)",
            [[trace.live_id for trace in traces.values()]],
        )
        for project_id, trace_id, trajectory_id in cursor.fetchall():
            traces[(project_id, trace_id)].trajectory_id = trajectory_id
        cursor.execute(
            "SELECT s.project_id, s.trace_id, s.record::text FROM trajectories_stagedspan s"
            " JOIN unnest(%s::bigint[], %s::text[]) AS k(p, t)"
            " ON s.project_id = k.p AND s.trace_id = k.t ORDER BY s.id",
            [[key[0] for key in keys], [key[1] for key in keys]],
        )
        while rows := cursor.fetchmany(2000):
            for project_id, trace_id, text in rows:
                traces[(project_id, trace_id)].add(orjson.loads(text))
    return list(traces.values())


@dataclass
class _Built:
    trace: _Trace
    task: str
    model_name: str
    metadata: dict[str, Any]
    steps: list[ParsedStep]
    hashes: list[str]
    errors: list[dict[str, str]]


def _build(trace: _Trace) -> _Built:
    """The trace's trajectory through the ``otel`` importer's mapping."""
    parsed = otel.trace_trajectory(trace.trace_id, trace.spans, "otlp", trace.resource)
    trace.spans = []
    return _Built(
        trace=trace,
        task=parsed.task,
        model_name=parsed.model_name[:200],
        metadata=parsed.metadata,
        steps=parsed.steps,
        hashes=prefix_hashes(parsed.task, parsed.steps),
        errors=trace.errors,
    )


def _assemble(traces: list[_Trace]) -> None:
    built = [_build(trace) for trace in traces]
    fresh = [item for item in built if item.trace.trajectory_id is None]
    if fresh:
        made = Trajectory.objects.bulk_create(
            [
                Trajectory(
                    project_id=item.trace.project_id,
                    external_id=item.trace.trace_id,
                    source_format=SOURCE_FORMAT,
                    task=item.task,
                    model_name=item.model_name,
                    metadata=item.metadata,
                    step_count=len(item.steps),
                    content_hash=live_hash(item.trace.project_id, item.trace.trace_id),
                )
                for item in fresh
            ]
        )
        for item, trajectory in zip(fresh, made, strict=True):
            item.trace.trajectory_id = trajectory.pk
    old = [item for item in built if item not in fresh]
    with connection.cursor() as cursor:
        if old:
            cursor.execute(
                "UPDATE trajectories_trajectory t SET task = u.task, model_name = u.model,"
                " metadata = u.metadata::jsonb, step_count = u.steps"
                " FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::int[])"
                " AS u(id, task, model, metadata, steps) WHERE t.id = u.id",
                [
                    [item.trace.trajectory_id for item in old],
                    [item.task for item in old],
                    [item.model_name for item in old],
                    [orjson.dumps(item.metadata).decode() for item in old],
                    [len(item.steps) for item in old],
                ],
            )
        grown = [item.trace.trajectory_id for item in old if item.trace.trajectory_id is not None]
        _steps_write(cursor, built, grown)
        cursor.execute(
            "UPDATE trajectories_livetrace l SET assembled_count = u.n, trajectory_id = u.tid,"
            " assembled_at = clock_timestamp(), errors = u.errors::jsonb"
            " FROM unnest(%s::bigint[], %s::int[], %s::bigint[], %s::text[])"
            " AS u(id, n, tid, errors)"
            " WHERE l.id = u.id",
            [
                [item.trace.live_id for item in built],
                [item.trace.count for item in built],
                [item.trace.trajectory_id for item in built],
                [orjson.dumps(item.errors[:100]).decode() for item in built],
            ],
        )


# One step's columns as the assembler writes them (the step id aside).
_StepRow = tuple[int, int, str, str, str, str, str, bool, Any, dict[str, Any], str]


def _steps_write(cursor: Any, built: list[_Built], grown: list[int]) -> None:
    """Insert the new steps and rewrite the changed ones of each trajectory, matching
    steps by span id. A trajectory whose steps change places first moves them all out of
    the way (``INDEX_SHIFT``), so the unique (trajectory, index) holds at every row."""
    existing: dict[int, dict[str, tuple[Any, ...]]] = {}
    if grown:
        cursor.execute(
            "SELECT trajectory_id, metadata->>'span_id', id, index, prefix_hash, labelable,"
            " metadata::text"
            " FROM trajectories_step WHERE trajectory_id = ANY(%s)",
            [grown],
        )
        for trajectory_id, span_id, *step in cursor.fetchall():
            existing.setdefault(trajectory_id, {})[span_id or ""] = tuple(step)
    inserts: list[_StepRow] = []
    updates: list[tuple[int, _StepRow]] = []
    moved: list[int] = []
    for item in built:
        trajectory_id = item.trace.trajectory_id
        have = existing.get(trajectory_id or 0, {})
        rows = [
            _row_of(item, index, step, prefix_hash)
            for index, (step, prefix_hash) in enumerate(zip(item.steps, item.hashes, strict=True))
        ]
        matched = [(have.get(str(step.metadata.get("span_id", ""))), step) for step in item.steps]
        shifted = any(
            before is not None and before[1] != index for index, (before, _) in enumerate(matched)
        )
        for row, (before, step) in zip(rows, matched, strict=True):
            if before is None:
                inserts.append(row)
                continue
            step_id, _, old_hash, old_labelable, old_metadata = before
            # Every step of a trajectory whose steps move is rewritten (all were moved
            # aside); otherwise only those whose place in the tree or content changed.
            if (
                shifted
                or old_hash != row[2]
                or old_labelable != step.labelable
                or orjson.loads(old_metadata) != step.metadata
            ):
                updates.append((step_id, row))
        if shifted and trajectory_id is not None:
            moved.append(trajectory_id)
    if moved:
        cursor.execute(
            "UPDATE trajectories_step SET index = index + %s WHERE trajectory_id = ANY(%s)",
            [INDEX_SHIFT, moved],
        )
    # The rows go as one JSON document each (see live_spans_accept): a quarter of the
    # assembler's time went to escaping text arrays element by element.
    columns = (
        "(u->>0)::bigint, (u->>1)::int, u->>2, u->>3, u->>4, u->>5, u->>6,"
        " (u->>7)::bool, (u->8)::jsonb, (u->9)::jsonb, u->>10"
    )
    # A span carries no RL training facts: those columns of STEP_COLUMNS are blank.
    inserted = (
        "(u->>0)::bigint, (u->>1)::int, u->>2, u->>3, u->>4, u->>5, u->>6,"
        " (u->>7)::bool, (u->8)::jsonb, (u->9)::jsonb,"
        " '', NULL, NULL, NULL, NULL, NULL, NULL, NULL, u->>10"
    )
    for start in range(0, len(updates), WRITE_ROWS):
        piece = updates[start : start + WRITE_ROWS]
        cursor.execute(
            "UPDATE trajectories_step s SET index = v.index, prefix_hash = v.prefix_hash,"
            " kind = v.kind, role = v.role, agent = v.agent, tool_name = v.tool_name,"
            " labelable = v.labelable, tool_args = v.tool_args, metadata = v.metadata,"
            " content = v.content"
            f" FROM (SELECT {columns} FROM json_array_elements(%s::json) AS u)"
            " AS v(id, index, prefix_hash, kind, role, agent, tool_name, labelable,"
            " tool_args, metadata, content) WHERE s.id = v.id",
            [orjson.dumps([[step_id, *row[1:]] for step_id, row in piece]).decode()],
        )
    for start in range(0, len(inserts), WRITE_ROWS):
        cursor.execute(
            f"INSERT INTO trajectories_step ({pgcopy.STEP_COLUMNS})"
            f" SELECT {inserted} FROM json_array_elements(%s::json) AS u",
            [orjson.dumps(inserts[start : start + WRITE_ROWS]).decode()],
        )
    if grown:
        # Their search documents describe the steps as they were: the index builds
        # them again (trajectories.services.search).
        cursor.execute("DELETE FROM trajectories_stepsearch WHERE trajectory_id = ANY(%s)", [grown])
        cursor.execute(
            "DELETE FROM trajectories_trajectorysearch WHERE trajectory_id = ANY(%s)", [grown]
        )


def _row_of(item: _Built, index: int, step: ParsedStep, prefix_hash: str) -> _StepRow:
    trajectory_id = item.trace.trajectory_id
    assert trajectory_id is not None
    return (
        trajectory_id,
        index,
        prefix_hash,
        step.kind,
        step.role,
        step.agent[:100],
        step.tool_name[:200],
        step.labelable,
        step.tool_args,
        step.metadata,
        step.content,
    )


def live_hash(project_id: int, trace_id: str) -> str:
    """A live trajectory's content hash: fixed by its trace, since its content changes
    while spans arrive (the unique hash per project then stands for the trace)."""
    return hashlib.sha256(f"otlp\0{project_id}\0{trace_id}".encode()).hexdigest()
