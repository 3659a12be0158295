"""Traces that arrive live over OTLP: accepting spans (assembling them into trajectories
is ``services/assembly.py``).

Accepting (:func:`live_spans_accept`, the receiver's whole write) stages the spans, three
statements in one transaction: the traces' ``LiveTrace`` rows are made or locked, the
spans go in with one ``INSERT ... SELECT FROM unnest`` that skips spans already staged (an
exporter's retry changes nothing), and the traces' counts move on. Nothing else happens
on the request's path; once it commits, the spans are kept.

The assembler (``services/assembly.py``) is queued once per burst of spans
(:func:`assembly_request`), and the periodic sweep (:func:`live_sweep`, from Celery beat)
queues it again if a task was lost.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from trajectories.formats.otlp import WireSpan
from trajectories.models import LiveAssembly, LiveTrace

logger = logging.getLogger(__name__)


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
