"""What the labeling services share: their errors (a status and a sentence for the
annotator), the history context label writes run in, and the checks a write makes
before it writes (may this user label, does the lease still hold, is the schema current)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pghistory
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from labeling.models import (
    LabelSchema,
    QueueAssignment,
    QueueItem,
)
from labeling.selectors import LabelingState, Lease

MAX_RATIONALE_CHARS = 20_000
MAX_CORRECTION_CHARS = 100_000
MAX_TIME_SPENT_MS = 24 * 3600 * 1000


class LabelingError(Exception):
    """A request the rules refuse; ``status`` is the HTTP status to answer with and
    ``field`` the input it is about (``value``, ``tags``, ``schema``; ``None`` for the
    request as a whole), so an API can name it."""

    status = 400

    def __init__(
        self, message: str, *, status: int | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        if status is not None:
            self.status = status


class StaleSchema(LabelingError):
    status = 409


class LeaseLost(LabelingError):
    status = 409


class NotAllowed(LabelingError):
    status = 403


@contextmanager
def history_context(**metadata: Any) -> Iterator[None]:
    """Mark the history events written inside with ``metadata`` (``undo_of``, ``action``).

    pghistory hands the metadata to the triggers through transaction-local settings, which
    would otherwise stay set until the transaction ends and mark later, unrelated writes
    in the same transaction too; they are cleared on the way out."""
    try:
        with pghistory.context(**metadata):
            yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT set_config('pghistory.context_id', '', true),"
                    " set_config('pghistory.context_metadata', '', true)"
                )
        except DatabaseError:
            pass  # the transaction failed and is rolled back, settings included


_HISTORY_SET = (
    "SELECT set_config('pghistory.context_id', %s, true),"
    " set_config('pghistory.context_metadata', %s, true)"
)
_HISTORY_CLEAR = (
    "SELECT set_config('pghistory.context_id', '', true),"
    " set_config('pghistory.context_metadata', '', true)"
)


def statements_run(cursor: Any, statements: list[tuple[str, list[Any]]]) -> list[list[Any]]:
    """Run ``statements`` one after the other in one round trip and return each one's
    rows. psycopg binds the parameters on the client, so several statements go to the
    server as one query string; each sees the writes of those before it, as separate
    calls would. Not inside :func:`history_context` (pghistory would skip to the last
    result)."""
    cursor.execute(
        "; ".join(sql for sql, _ in statements), [p for _, params in statements for p in params]
    )
    results = []
    while True:
        results.append(cursor.fetchall() if cursor.description else [])
        if not cursor.nextset():
            return results


def history_statement(sql: str, params: list[Any], **metadata: Any) -> list[tuple[str, list[Any]]]:
    """One statement marked as :func:`history_context` marks what is written inside it,
    as statements for :func:`statements_run`: the settings the history triggers read are
    set before it and cleared after it, in the same round trip."""
    context = [str(uuid.uuid4()), json.dumps(metadata, cls=DjangoJSONEncoder)]
    return [(_HISTORY_SET, context), (sql, params), (_HISTORY_CLEAR, [])]


# --- Permission ---------------------------------------------------------------------------


def require_can_label(state: LabelingState) -> None:
    """Reviewers may label anything in their project; annotators only what a queue leased
    them. An expired lease is renewed while the item still has room for them."""
    if state.role is None:
        raise NotAllowed("You are not a member of this project.")
    if state.schema is None:
        raise LabelingError("This project has no active label schema; an admin must add one.")
    if state.reviewer:
        return
    if state.lease is None:
        raise NotAllowed("Take this trajectory from a queue to label it.")
    lease_keep(state.lease)


def lease_keep(lease: Lease) -> None:
    """Extend an active lease that is past half its time (activity keeps it), or resume an
    expired one if the item still has room; otherwise the slot went to someone else."""
    if lease.submitted:
        return
    now = timezone.now()
    assignment = (
        QueueAssignment.objects.select_related("item__queue")
        .only("id", "status", "expires_at", "item__queue__lease_seconds", "item__queue__overlap")
        .get(pk=lease.assignment_id)
    )
    lease_for = dt.timedelta(seconds=assignment.item.queue.lease_seconds)
    if not lease.expired:
        if lease.expires_at - now < lease_for / 2:
            QueueAssignment.objects.filter(pk=assignment.pk).update(expires_at=now + lease_for)
        return
    with transaction.atomic():
        # The item row is the lock every change to its assignments takes first.
        QueueItem.objects.select_for_update().get(pk=lease.item_id)
        lost = active_count(lease.item_id, exclude=assignment.pk) >= assignment.item.queue.overlap
        if lost:
            QueueAssignment.objects.filter(pk=assignment.pk).update(
                status=QueueAssignment.Status.EXPIRED
            )
        else:
            QueueAssignment.objects.filter(pk=assignment.pk).update(
                status=QueueAssignment.Status.LEASED, leased_at=now, expires_at=now + lease_for
            )
    if lost:
        # Raised after the commit: the lease is gone whatever this request does next.
        raise LeaseLost(
            "Your lease on this trajectory expired and another annotator took it."
            " Your labels so far are kept; take the next item from the queue."
        )


def active_count(item_id: int, *, exclude: int | None = None) -> int:
    """Assignments that count towards an item's overlap: submitted, or leased and not yet
    expired. Run it after locking the item so it sees every committed assignment."""
    queryset = QueueAssignment.objects.filter(item_id=item_id).filter(
        Q(status=QueueAssignment.Status.SUBMITTED)
        | Q(status=QueueAssignment.Status.LEASED, expires_at__gt=timezone.now())
    )
    if exclude is not None:
        queryset = queryset.exclude(pk=exclude)
    return queryset.count()


def check_schema(state: LabelingState, schema_id: int | None) -> LabelSchema:
    schema = state.schema
    assert schema is not None  # require_can_label checked it
    if schema_id is None or schema_id == schema.pk:
        return schema
    for active in state.schemas:
        if active.pk == schema_id:
            return active
    other = LabelSchema.objects.filter(pk=schema_id).only("project_id", "name", "version").first()
    if other is None or other.project_id != state.project.pk:
        raise LabelingError("That label schema does not belong to this project.", field="schema")
    if state.lease is not None and state.lease.schemas and other.name not in state.lease.schemas:
        raise LabelingError(
            f"Queue {state.lease.queue_name!r} asks for {', '.join(state.lease.schemas)};"
            f" not for {other.name!r}.",
            field="schema",
        )
    newest = next((s for s in state.schemas if s.name == other.name), None)
    now = f"the project now uses v{newest.version}" if newest else "it is no longer labelled"
    raise StaleSchema(
        field="schema",
        message=f"The label schema {other.name!r} changed (this page uses v{other.version},"
        f" {now}). Reload the page to label with the new version.",
    )
