"""Assembling live traces (staged by the OTLP receiver, ``services/live.py``) into
trajectories, as they grow.

:func:`live_traces_assemble` (a Celery task) takes the pending traces (more spans staged
than assembled), a batch at a time, each under its advisory lock, and reads the spans
staged since each trace's last assembly (``LiveTrace.assembled_through``), at most
``PIECE_SPANS`` of a trace at a time. They are mapped with the ``otel`` importer's own
code. Where they simply follow the steps built so far (``spans.extend``: none is the
missing parent of an earlier span, none starts before the last step), their steps are
appended: the trajectory's earlier steps are neither read nor rewritten, save an agent
step that now has a model call below it (it stops being labelable). What the next
assembly needs is kept on the trace as JSON (``LiveTrace.state``: the folded task, model
and totals, the last step's start and prefix hash, the parents still missing). So a
trace of 100,000 spans is assembled in pieces, in a worker's memory one piece at a time.

Otherwise (a root that comes after its children, as OpenTelemetry exports a span when it
ends; a span that started before the last step) the trace is built again from all its
staged spans and its steps are matched by span id, so that a step keeps its row (and the
labels, scores and history on it); only changed steps are written. A trace of more than
``PIECE_SPANS`` spans is built again in pieces too (:func:`_planned`): its spans' order is
worked out from their skeletons (ids, parents, kinds, times: no texts), then its steps are
made and written ``PIECE_SPANS`` at a time, so a root that arrives after 100,000 children,
as an SDK exports it, needs no more memory than the trace's skeleton.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import math
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import connection, transaction

from stepscope.locks import LockClass
from stepscope.queueing import QueueUnavailable, send_if_up
from trajectories.arrivals import trajectories_arrived
from trajectories.formats import otel
from trajectories.formats import spans as span_tree
from trajectories.formats.base import FieldError, ParsedStep
from trajectories.formats.chat_content import first_user_text
from trajectories.formats.spans import Placed, Span, Summary
from trajectories.hashing import prefix_hashes
from trajectories.models import LiveAssembly
from trajectories.services import assembly_steps

logger = logging.getLogger(__name__)

SOURCE_FORMAT = "otel"
# Traces taken per transaction, and batches per task (a task with more left queues the
# next one rather than holding a worker for long).
ASSEMBLE_BATCH = 200
ASSEMBLE_BATCHES = 25
# Spans of one trace read and mapped at a time, and spans of all the batch's traces:
# what bounds the assembler's memory, however large a trace.
PIECE_SPANS = 5000
BATCH_SPANS = 10_000
# Missing parents kept in a trace's state; past it, the trace is built again each time.
ABSENT_KEPT = 1000
# Seconds between the search-index tasks the assembler queues for one project.
SEARCH_EVERY = 5.0


@dataclass(eq=False)
class _Trace:
    live_id: int
    project_id: int
    trace_id: str
    trajectory_id: int | None
    # Spans staged for the trace so far (read or not).
    span_count: int
    # Staged spans read so far (counting those the mapping refused), and the last one.
    count: int
    through: int
    state: dict[str, Any] | None
    errors: list[dict[str, str]]
    # The piece being assembled: its spans, mapped as they are read (the records are not
    # kept), and whether the trace may have more spans staged after it.
    spans: list[Span] = field(default_factory=list)
    more: bool = False
    # Staged spans read before this piece.
    count_before: int = 0
    resource: dict[str, Any] = field(default_factory=dict)
    session_id: Any = None

    def add(self, staged_id: int, record: dict[str, Any]) -> None:
        try:
            _, span = otel.span_record(record, "")
        except FieldError as error:
            span_id = str(record.get("spanId"))
            self.errors.append({"span_id": span_id, "field": error.field, "message": error.message})
        else:
            span.order = self.count
            span.raw = None
            self.spans.append(span)
            if not self.resource and isinstance(record.get("resource"), dict):
                self.resource = record["resource"]
            if self.session_id is None:
                self.session_id = span.extra.get("session_id")
        self.count += 1
        self.through = staged_id


def live_traces_assemble(*, batch: int = ASSEMBLE_BATCH, batches: int = ASSEMBLE_BATCHES) -> int:
    """Assemble pending traces, up to ``batch`` per transaction, until none is left that
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
            todo = traces
            while todo:
                _pieces_read(todo)
                _assemble(todo)
                todo = [trace for trace in todo if trace.more]
            _arrived(traces)
            assembled += len(traces)
            projects.update(trace.project_id for trace in traces)
    else:
        send_if_up(_task(), what="live trace assembly (more pending)")
    for project_id in sorted(projects):
        _search_index_later(project_id)
    return assembled


def _arrived(traces: list[_Trace]) -> None:
    """Announce the batch's new and grown trajectories, by project, on commit."""
    by_project: dict[int, list[int]] = {}
    for trace in traces:
        if trace.trajectory_id is not None:
            by_project.setdefault(trace.project_id, []).append(trace.trajectory_id)
    for project_id, ids in sorted(by_project.items()):
        trajectories_arrived(project_id=project_id, trajectory_ids=ids, source="live")


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
    """Up to ``batch`` pending traces (fewer where their pending spans pass
    ``BATCH_SPANS``), each locked for this transaction; None when no pending trace is
    left but those other assemblers hold (listed in ``skipped``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, least(span_count - assembled_count, %s) FROM trajectories_livetrace"
            " WHERE span_count > assembled_count AND NOT (id = ANY(%s))"
            " ORDER BY last_span_at LIMIT %s",
            [PIECE_SPANS, skipped, batch],
        )
        candidates: list[int] = []
        spans = 0
        for live_id, pending in cursor.fetchall():
            if candidates and spans + pending > BATCH_SPANS:
                break
            candidates.append(live_id)
            spans += pending
        if not candidates:
            return None
        cursor.execute(
            "SELECT id FROM unnest(%s::bigint[]) AS id"
            " WHERE pg_try_advisory_xact_lock(%s, id::int)",
            [candidates, int(LockClass.LIVE_TRACE)],
        )
        locked = {row[0] for row in cursor.fetchall()}
        skipped.extend(live_id for live_id in candidates if live_id not in locked)
        # Read under the lock: another assembler may have committed since the list above.
        cursor.execute(
            "SELECT id, project_id, trace_id, trajectory_id, span_count, assembled_count,"
            " assembled_through, state::text, errors::text FROM trajectories_livetrace"
            " WHERE id = ANY(%s) AND span_count > assembled_count ORDER BY id",
            [sorted(locked)],
        )
        return [
            _Trace(
                live_id=live_id,
                project_id=project_id,
                trace_id=trace_id,
                trajectory_id=trajectory_id,
                span_count=span_count,
                count=count,
                through=through,
                state=None if state is None else orjson.loads(state),
                errors=orjson.loads(errors),
            )
            for (
                live_id,
                project_id,
                trace_id,
                trajectory_id,
                span_count,
                count,
                through,
                state,
                errors,
            ) in cursor.fetchall()
        ]


def _pieces_read(traces: list[_Trace]) -> None:
    """The next piece of each trace: up to ``PIECE_SPANS`` spans staged after its last."""
    for trace in traces:
        trace.spans, trace.more, trace.count_before = [], False, trace.count
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT k.i, s.id, s.record::text FROM unnest(%s::bigint[], %s::text[], %s::bigint[])"
            " WITH ORDINALITY AS k(p, t, after, i)"
            " CROSS JOIN LATERAL (SELECT id FROM trajectories_stagedspan"
            "  WHERE project_id = k.p AND trace_id = k.t AND id > k.after ORDER BY id LIMIT %s)"
            " AS o JOIN trajectories_stagedspan s ON s.id = o.id"
            " ORDER BY k.i, s.id",
            [
                [trace.project_id for trace in traces],
                [trace.trace_id for trace in traces],
                [trace.through for trace in traces],
                PIECE_SPANS,
            ],
        )
        read = [0] * len(traces)
        while rows := cursor.fetchmany(2000):
            for position, staged_id, text in rows:
                traces[position - 1].add(staged_id, orjson.loads(text))
                read[position - 1] += 1
    for trace, n in zip(traces, read, strict=True):
        trace.more = n == PIECE_SPANS


@dataclass(eq=False)
class _Plan:
    """A large trace's spans in step order (their skeletons), and the staged row of each
    span by its ``order``."""

    order: span_tree.Order
    staged: array[int]


@dataclass(eq=False)
class _Built:
    """A trace's trajectory as this assembly leaves it, and the steps to write."""

    trace: _Trace
    summary: Summary
    steps: list[ParsedStep]
    hashes: list[str]
    # Appended after the trajectory's steps, or the trajectory's steps in their new order.
    appended: bool
    state: dict[str, Any] | None
    # Indexes of earlier steps that now have a model call below them.
    model_below: list[int] = field(default_factory=list)
    # A large trace built again: its steps are made and written in pieces from this.
    plan: _Plan | None = None

    @property
    def metadata(self) -> dict[str, Any]:
        return otel.trace_metadata(
            self.trace.trace_id, self.summary.totals, self.state_value("session_id"), self.resource
        )

    @property
    def resource(self) -> dict[str, Any]:
        value = self.state_value("resource")
        return value if isinstance(value, dict) else {}

    def state_value(self, key: str) -> Any:
        return None if self.state is None else self.state.get(key)


def _assemble(traces: list[_Trace]) -> None:
    placed = _placed(
        [trace for trace in traces if trace.trajectory_id is not None and trace.state is not None]
    )
    built: list[_Built] = []
    again: list[_Trace] = []
    for trace in traces:
        item = _extended(trace, placed.get(trace.live_id, {}))
        if item is None:
            again.append(trace)
        else:
            built.append(item)
    built += _rebuilt([trace for trace in again if trace.span_count <= PIECE_SPANS])
    built += [_planned(trace) for trace in again if trace.span_count > PIECE_SPANS]
    fresh = [item for item in built if item.trace.trajectory_id is None]
    made_ids: set[int | None] = set()
    if fresh:
        # One JSON document, not the ORM's parameters per field (see _COLUMNS).
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO trajectories_trajectory (project_id, external_id, source_format,"
                " task_key, task, ground_truth, model_name, metadata, step_count, content_hash,"
                " created_at, policy_version)"
                " SELECT (u->>0)::bigint, u->>1, %s, '', u->>2, '', u->>3, u->4, (u->>5)::int,"
                " u->>6, now(), '' FROM json_array_elements(%s::json) AS u"
                " RETURNING project_id, external_id, id",
                [
                    SOURCE_FORMAT,
                    orjson.dumps(
                        [
                            [
                                item.trace.project_id,
                                item.trace.trace_id,
                                item.summary.task,
                                item.summary.model[:200],
                                item.metadata,
                                item.summary.spans,
                                live_hash(item.trace.project_id, item.trace.trace_id),
                            ]
                            for item in fresh
                        ]
                    ).decode(),
                ],
            )
            made = {(project_id, trace_id): pk for project_id, trace_id, pk in cursor.fetchall()}
        for item in fresh:
            item.trace.trajectory_id = made[(item.trace.project_id, item.trace.trace_id)]
        made_ids.update(made.values())
    old = [item for item in built if item.trace.trajectory_id not in made_ids]
    with connection.cursor() as cursor:
        if old:
            # One JSON document, not arrays of text (see _COLUMNS).
            cursor.execute(
                "UPDATE trajectories_trajectory t SET task = u->>1, model_name = u->>2,"
                " metadata = u->3, step_count = (u->>4)::int"
                " FROM json_array_elements(%s::json) AS u WHERE t.id = (u->>0)::bigint",
                [
                    orjson.dumps(
                        [
                            [
                                item.trace.trajectory_id,
                                item.summary.task,
                                item.summary.model[:200],
                                item.metadata,
                                item.summary.spans,
                            ]
                            for item in old
                        ]
                    ).decode()
                ],
            )
        assembly_steps.labelable_update(cursor, [item for item in built if item.model_below])
        assembly_steps.steps_copy([item for item in built if item.appended])
        assembly_steps.steps_rewrite(
            cursor, [item for item in built if not item.appended and not item.plan]
        )
        for item in built:
            if item.plan:
                _steps_write_in_pieces(cursor, item, item.plan)
        grown = [item.trace.trajectory_id for item in old]
        if grown:
            # The mark sends the search index back to the trajectory (its task and new
            # steps); a rebuilt trajectory's step documents go too (its steps changed).
            cursor.execute(
                "DELETE FROM trajectories_trajectorysearch WHERE trajectory_id = ANY(%s)", [grown]
            )
            rebuilt = [item.trace.trajectory_id for item in old if not item.appended]
            if rebuilt:
                cursor.execute(
                    "DELETE FROM trajectories_stepsearch WHERE trajectory_id = ANY(%s)", [rebuilt]
                )
        cursor.execute(
            "UPDATE trajectories_livetrace l SET assembled_count = (u->>1)::int,"
            " trajectory_id = (u->>2)::bigint, assembled_through = (u->>3)::bigint,"
            " state = u->4, errors = u->5, assembled_at = clock_timestamp()"
            " FROM json_array_elements(%s::json) AS u WHERE l.id = (u->>0)::bigint",
            [
                orjson.dumps(
                    [
                        [
                            item.trace.live_id,
                            item.trace.count,
                            item.trace.trajectory_id,
                            item.trace.through,
                            item.state,
                            item.trace.errors[:100],
                        ]
                        for item in built
                    ]
                ).decode()
            ],
        )
    for item in built:
        item.trace.state = item.state


def _placed(traces: list[_Trace]) -> dict[int, dict[str, Placed]]:
    """The earlier steps each trace's new spans name as parents, by span id."""
    wanted = {
        trace.live_id: {span.parent_span_id for span in trace.spans}
        - {span.span_id for span in trace.spans}
        - {""}
        for trace in traces
    }
    by_trajectory = {
        trace.trajectory_id: trace.live_id for trace in traces if wanted[trace.live_id]
    }
    if not by_trajectory:
        return {}
    found: dict[int, dict[str, Placed]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT trajectory_id, metadata->>'span_id', index, metadata->>'depth', agent"
            " FROM trajectories_step WHERE trajectory_id = ANY(%s)"
            " AND metadata->>'span_id' = ANY(%s)",
            [list(by_trajectory), sorted(set().union(*wanted.values()))],
        )
        for trajectory_id, span_id, index, depth, agent in cursor.fetchall():
            live_id = by_trajectory[trajectory_id]
            if span_id in wanted[live_id]:
                found.setdefault(live_id, {})[span_id] = Placed(index, int(depth or 0), agent)
    return found


def _extended(trace: _Trace, placed: dict[str, Placed]) -> _Built | None:
    """The trace's piece appended to its trajectory (or making it, for a trace's first
    piece), or None where the trace must be built again."""
    if trace.trajectory_id is None:
        if trace.count_before:
            return None  # assembled before, and its trajectory deleted since
        state: dict[str, Any] = {
            "summary": Summary().as_json(),
            "last_start": None,
            "last_hash": "",
            "absent": [],
            "resource": trace.resource,
            "session_id": trace.session_id,
        }
    elif trace.state is None or trace.state.get("absent") is None:
        return None
    else:
        state = copy.deepcopy(trace.state)
    summary = Summary.from_json(state["summary"])
    before = summary.spans
    task = summary.task
    last_start = state["last_start"]
    extension = span_tree.extend(
        trace.spans,
        placed=placed,
        after=-math.inf if last_start is None else last_start,
        absent=set(state["absent"]),
        first_index=before,
        summary=summary,
    )
    if extension is None or (before and summary.task != task):
        return None  # the tree, the order or the task (every prefix hash) changed
    hashes = prefix_hashes(summary.task, extension.steps, state["last_hash"])
    absent = sorted({*state["absent"], *extension.absent})
    state.update(
        summary=summary.as_json(),
        last_start=_finite(extension.last_start),
        last_hash=hashes[-1] if hashes else state["last_hash"],
        absent=absent if len(absent) <= ABSENT_KEPT else None,
    )
    if not state["resource"]:
        state["resource"] = trace.resource
    if state["session_id"] is None:
        state["session_id"] = trace.session_id
    trace.spans = []
    return _Built(
        trace=trace,
        summary=summary,
        steps=extension.steps,
        hashes=hashes,
        appended=True,
        state=state,
        model_below=[placed[span_id].index for span_id in sorted(extension.model_below)],
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _rebuilt(traces: list[_Trace]) -> list[_Built]:
    """Each trace built again from all its staged spans."""
    if not traces:
        return []
    by_key = {(trace.project_id, trace.trace_id): trace for trace in traces}
    for trace in traces:
        trace.spans, trace.count, trace.errors, trace.more = [], 0, [], False
        trace.resource, trace.session_id = {}, None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.project_id, s.trace_id, s.id, s.record::text FROM trajectories_stagedspan s"
            " JOIN unnest(%s::bigint[], %s::text[]) AS k(p, t)"
            " ON s.project_id = k.p AND s.trace_id = k.t ORDER BY s.id",
            [[key[0] for key in by_key], [key[1] for key in by_key]],
        )
        while rows := cursor.fetchmany(2000):
            for project_id, trace_id, staged_id, text in rows:
                by_key[(project_id, trace_id)].add(staged_id, orjson.loads(text))
    built = []
    for trace in traces:
        tree = span_tree.build(trace.spans)
        trace.spans = []
        hashes = prefix_hashes(tree.task, tree.steps)
        absent = sorted(tree.absent)
        state = {
            "summary": tree.summary.as_json(),
            "last_start": _finite(tree.last_start),
            "last_hash": hashes[-1] if hashes else "",
            "absent": absent if len(absent) <= ABSENT_KEPT else None,
            "resource": trace.resource,
            "session_id": trace.session_id,
        }
        built.append(
            _Built(
                trace=trace,
                summary=tree.summary,
                steps=tree.steps,
                hashes=hashes,
                appended=False,
                state=state,
            )
        )
    return built


def _planned(trace: _Trace) -> _Built:
    """A large trace built again from the skeletons of its staged spans, read a piece at
    a time: its order, summary and state (but the last hash); its steps are made and
    written by :func:`_steps_write_in_pieces`."""
    trace.spans, trace.count, trace.errors, trace.more = [], 0, [], False
    trace.resource, trace.session_id = {}, None
    skeletons: list[Span] = []
    staged = array("q")
    # The sums that need no order: token counts, cost, first start and last end.
    sums = Summary()
    after = 0
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT id, record::text FROM trajectories_stagedspan"
                " WHERE project_id = %s AND trace_id = %s AND id > %s ORDER BY id LIMIT %s",
                [trace.project_id, trace.trace_id, after, PIECE_SPANS],
            )
            rows = cursor.fetchall()
            for staged_id, text in rows:
                staged.append(staged_id)
                trace.add(staged_id, orjson.loads(text))
                if trace.spans:
                    span = trace.spans.pop()
                    sums.add(span)
                    skeletons.append(span_tree.skeleton(span))
            if len(rows) < PIECE_SPANS:
                break
            after = rows[-1][0]
    order = span_tree.order_of(skeletons)
    del skeletons
    summary = Summary()
    for _, _, span in order.ordered:
        summary.add(span)
    summary.llm_tokens, summary.llm_tokens_seen = sums.llm_tokens, sums.llm_tokens_seen
    summary.all_tokens, summary.cost, summary.priced = sums.all_tokens, sums.cost, sums.priced
    summary.first_start, summary.last_end = sums.first_start, sums.last_end
    source = span_tree.task_source(order.ordered)
    if source is not None:
        (full,) = _spans_read([staged[source.order]]).values()
        summary.task = first_user_text(full.input)
        summary.task_from_model = source.kind in span_tree.MODEL_KINDS
    absent = sorted(order.absent)
    state = {
        "summary": summary.as_json(),
        "last_start": _finite(order.last_start),
        "last_hash": "",
        "absent": absent if len(absent) <= ABSENT_KEPT else None,
        "resource": trace.resource,
        "session_id": trace.session_id,
    }
    return _Built(
        trace=trace,
        summary=summary,
        steps=[],
        hashes=[],
        appended=False,
        state=state,
        plan=_Plan(order=order, staged=staged),
    )


def _spans_read(staged_ids: list[int]) -> dict[int, Span]:
    """The staged spans of these rows, mapped, by row id (those the mapping refuses are
    left out: the plan has none of them)."""
    spans: dict[int, Span] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, record::text FROM trajectories_stagedspan WHERE id = ANY(%s)",
            [staged_ids],
        )
        for staged_id, text in cursor.fetchall():
            _, spans[staged_id] = otel.span_record(orjson.loads(text), "")
    return spans


def _steps_write_in_pieces(cursor: Any, item: _Built, plan: _Plan) -> None:
    """A large trace's steps, made from its plan and written ``PIECE_SPANS`` at a time:
    each span read again whole, its step matched by span id (keeping its row), all of
    the trajectory's steps first moved out of the way (``assembly_steps.INDEX_SHIFT``)."""
    trajectory_id = item.trace.trajectory_id
    assert trajectory_id is not None
    cursor.execute(
        "UPDATE trajectories_step SET index = index + %s WHERE trajectory_id = %s",
        [assembly_steps.INDEX_SHIFT, trajectory_id],
    )
    index_of: dict[str, int] = {}
    agents: dict[str, str] = {}
    last_hash = ""
    ordered = plan.order.ordered
    # Only a parent's index and agent are looked up again: the others are let go.
    parents = {span.parent_span_id for _, _, span in ordered}
    for first in range(0, len(ordered), PIECE_SPANS):
        piece = ordered[first : first + PIECE_SPANS]
        read = _spans_read([plan.staged[span.order] for _, _, span in piece])
        spans = []
        for moment, depth, outline in piece:
            span = read[plan.staged[outline.order]]
            # As ordered: a span caught in a cycle of parent ids hangs from no parent.
            span.order, span.parent_span_id = outline.order, outline.parent_span_id
            spans.append((moment, depth, span))
        steps = span_tree.steps_in_order(spans, plan.order.has_model_below, index_of, agents, first)
        hashes = prefix_hashes(item.summary.task, steps, last_hash)
        last_hash = hashes[-1] if hashes else last_hash
        cursor.execute(
            "SELECT metadata->>'span_id', id FROM trajectories_step"
            " WHERE trajectory_id = %s AND metadata->>'span_id' = ANY(%s)",
            [trajectory_id, [span.span_id for _, _, span in spans]],
        )
        have = dict(cursor.fetchall())
        inserts: list[assembly_steps.StepRow] = []
        updates: list[tuple[int, assembly_steps.StepRow]] = []
        for n, (step, prefix_hash) in enumerate(zip(steps, hashes, strict=True)):
            row = assembly_steps.step_row(trajectory_id, first + n, prefix_hash, step)
            step_id = have.get(str(step.metadata.get("span_id", "")))
            if step_id is None:
                inserts.append(row)
            else:
                updates.append((step_id, row))
        assembly_steps.steps_update(cursor, updates)
        assembly_steps.steps_insert(cursor, inserts)
        for span_id in [span_id for span_id in index_of if span_id not in parents]:
            del index_of[span_id], agents[span_id]
    assert item.state is not None
    item.state["last_hash"] = last_hash


def live_hash(project_id: int, trace_id: str) -> str:
    """A live trajectory's content hash: fixed by its trace, since its content changes
    while spans arrive (the unique hash per project then stands for the trace)."""
    return hashlib.sha256(f"otlp\0{project_id}\0{trace_id}".encode()).hexdigest()
