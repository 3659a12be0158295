"""Labeling queues: made from a selection of trajectories, their order (as created, or
most uncertain first under the latest trained head) and leases taken with
``FOR UPDATE SKIP LOCKED``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, Min, OuterRef, QuerySet
from django.utils import timezone

from labeling.models import (
    LabelSchema,
    Queue,
    QueueAssignment,
    QueueItem,
)
from labeling.services.common import (
    LabelingError,
    active_count,
)
from labeling.spans import SpanSchema
from stepscope import locks
from trajectories.models import Project
from trajectories.selection import TrajectoryFilters, selection_definition
from trajectories.selectors import selection_check, trajectories_filtered


def _names_checked(
    names: list[str] | None, schemas: QuerySet[Any], *, field: str, said: str, what: str
) -> list[str]:
    """``names`` without repeats, each an active schema of ``schemas`` (the project's
    label or span schemas); else LabelingError naming ``field`` and the active ones
    (``said``: how the message names the field, ``what``: the kind of schema)."""
    names = list(dict.fromkeys(names or []))
    if not names:
        return names
    active = set(schemas.filter(is_active=True).values_list("name", flat=True))
    unknown = [name for name in names if name not in active]
    if unknown:
        raise LabelingError(
            f"{said}: {', '.join(map(repr, unknown))} is no active {what} of this project"
            f" (active: {', '.join(sorted(active)) or 'none'}).",
            field=field,
        )
    return names


def queue_create(
    *,
    project: Project,
    name: str,
    created_by: User | None,
    filters: TrajectoryFilters,
    overlap: int = 1,
    lease_seconds: int = 30 * 60,
    assignees: list[User] | None = None,
    description: str = "",
    limit: int | None = None,
    order: str = Queue.Order.POSITION,
    schemas: list[str] | None = None,
    span_schemas: list[str] | None = None,
) -> Queue:
    """A queue over the project's trajectories that match ``filters`` (oldest first, at
    most ``limit``), inserted in one statement whatever the selection's size; leased in
    ``order`` (for "most uncertain first", ranked by the latest trained head now).
    ``schemas`` names the active step schemas it asks for (none: every active one),
    ``span_schemas`` the active span schemas (none: no span asked for)."""
    if Queue.objects.filter(project=project, name=name).exists():
        raise LabelingError(f"A queue named {name!r} exists already.")
    if order not in Queue.Order.values:
        raise LabelingError(f"Unknown queue order {order!r}.")
    schemas = _names_checked(
        schemas,
        LabelSchema.objects.filter(project=project),
        field="schemas",
        said="Queue schemas",
        what="label schema",
    )
    span_schemas = _names_checked(
        span_schemas,
        SpanSchema.objects.filter(project=project),
        field="span_schemas",
        said="Queue span schemas",
        what="span schema",
    )
    selection_check(project, filters)  # SelectionError names a scorer or run it lacks
    with transaction.atomic():
        queue = Queue.objects.create(
            project=project,
            name=name,
            description=description,
            overlap=overlap,
            lease_seconds=lease_seconds,
            order=order,
            schemas=schemas,
            span_schemas=span_schemas,
            created_by=created_by,
            selection=selection_definition(filters) | ({"limit": limit} if limit else {}),
        )
        if assignees:
            queue.assignees.set(assignees)
        selection = trajectories_filtered(project, filters).order_by("id").values("id")
        if limit:
            selection = selection[:limit]
        sql, params = selection.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO labeling_queueitem (queue_id, trajectory_id, position, created_at)"
                f" SELECT %s, sel.id, row_number() OVER (ORDER BY sel.id), %s FROM ({sql}) sel",
                [queue.pk, timezone.now(), *params],
            )
        if order == Queue.Order.UNCERTAIN:
            queue_uncertainty_refresh(queue=queue)
    return queue


def queue_items_insert(*, queue: Queue, ranked_sql: str, params: list[Any]) -> int:
    """Add to ``queue`` the trajectories a query of a higher app picks, in its order:
    ``ranked_sql`` selects ``trajectory_id`` and ``rank`` (anything PostgreSQL orders,
    an array included), one row per trajectory. Inserted in one statement, after the
    queue's existing items. How many were added."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO labeling_queueitem (queue_id, trajectory_id, position, created_at)"
            " SELECT %s, picked.trajectory_id,"
            " (SELECT coalesce(max(position), 0) FROM labeling_queueitem WHERE queue_id = %s)"
            " + row_number() OVER (ORDER BY picked.rank), %s"
            f" FROM ({ranked_sql}) picked",
            [queue.pk, queue.pk, timezone.now(), *params],
        )
        return cursor.rowcount


def queue_order_set(*, queue: Queue, order: str) -> Queue:
    if order not in Queue.Order.values:
        raise LabelingError(f"Unknown queue order {order!r}.")
    with transaction.atomic():
        queue.order = order
        queue.save(update_fields=["order"])
        if order == Queue.Order.UNCERTAIN:
            queue_uncertainty_refresh(queue=queue)
    return queue


# What "most uncertain first" ranks by: a query of a project's unlabelled steps with their
# ``trajectory_id`` and ``uncertainty`` (lower ranks first), or None while there is nothing
# to rank by. Scores are scoring's: it registers its query from ScoringConfig.ready()
# (``scoring/queue_order.py``: the latest trained head's scores).
UncertainSteps = Callable[[Project], QuerySet[Any] | None]
_UNCERTAIN_STEPS: list[UncertainSteps] = []  # scoring's, once it registers


def queue_uncertainty_register(source: UncertainSteps) -> UncertainSteps:
    _UNCERTAIN_STEPS[:] = [source]
    return source


def queue_uncertainty_refresh(*, queue: Queue) -> int:
    """Rank the queue's items for "most uncertain first": each trajectory by its most
    uncertain unlabelled step (from the registered source: the score nearest 0.5 under
    the project's latest trained head); trajectories with no such step go last. Returns
    how many items got a rank.

    Leasing then reads the stored rank through an index, whatever the queue's size; a
    trained head's scoring run ranks the project's uncertain queues again when it ends."""
    steps = _UNCERTAIN_STEPS[0](queue.project) if _UNCERTAIN_STEPS else None
    if steps is None:
        QueueItem.objects.filter(queue=queue).update(uncertainty=None)
        return 0
    uncertain = (
        steps.filter(
            Exists(QueueItem.objects.filter(queue=queue, trajectory_id=OuterRef("trajectory_id")))
        )
        .order_by()
        .values("trajectory_id")
        .annotate(least=Min("uncertainty"))
    )
    sql, params = uncertain.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE labeling_queueitem SET uncertainty = NULL"
            " WHERE queue_id = %s AND uncertainty IS NOT NULL",
            [queue.pk],
        )
        cursor.execute(
            "UPDATE labeling_queueitem i SET uncertainty = u.least"
            f" FROM ({sql}) u WHERE i.queue_id = %s AND i.trajectory_id = u.trajectory_id",
            [*params, queue.pk],
        )
        return cursor.rowcount


def queues_uncertainty_refresh(*, project: Project) -> int:
    """Rank every active "most uncertain first" queue of ``project`` again (after a new
    trained head scored its steps). Returns how many queues were ranked."""
    queues = list(
        Queue.objects.filter(project=project, order=Queue.Order.UNCERTAIN, is_active=True)
    )
    for queue in queues:
        queue_uncertainty_refresh(queue=queue)
    return len(queues)


def queue_item_take(*, queue: Queue, annotator: User | AbstractBaseUser) -> QueueAssignment | None:
    """Lease the next item of ``queue`` to ``annotator`` (``None`` when nothing is left for
    them). Their open lease comes back first; an expired one is resumed while the item has
    room. Otherwise the first item they have never held, with fewer than ``overlap``
    submitted or live leases, is locked with ``FOR UPDATE SKIP LOCKED`` (two annotators
    asking at once get different items instead of waiting on each other), recounted under
    the lock and leased.

    Each attempt runs in a savepoint: an item found full is let go at once, so a taker
    never holds one item's lock while waiting for another's (no deadlock between takers).
    """
    if not queue.is_active:
        raise LabelingError("This queue is closed.")
    now = timezone.now()
    lease_for = dt.timedelta(seconds=queue.lease_seconds)
    with transaction.atomic():
        # One taker per annotator at a time (two tabs pressing n at once).
        locks.xact_lock(locks.LockClass.QUEUE_TAKE, annotator.pk)
        mine = (
            QueueAssignment.objects.filter(
                item__queue=queue, annotator_id=annotator.pk, status=QueueAssignment.Status.LEASED
            )
            .order_by("-leased_at")
            .first()
        )
        if mine is not None:
            if mine.expires_at > now:
                return mine
            try:
                with transaction.atomic():
                    QueueItem.objects.select_for_update().get(pk=mine.item_id)
                    if active_count(mine.item_id, exclude=mine.pk) >= queue.overlap:
                        raise _ItemFull(mine.item_id)
                    mine.leased_at, mine.expires_at = now, now + lease_for
                    mine.save(update_fields=["leased_at", "expires_at"])
                    return mine
            except _ItemFull:
                mine.status = QueueAssignment.Status.EXPIRED
                mine.save(update_fields=["status"])
        tried: list[int] = []
        while True:
            try:
                with transaction.atomic():
                    item_id = _next_free_item(queue, annotator.pk, exclude=tried, now=now)
                    if item_id is None:
                        # The candidates may only be locked by other takers for a moment:
                        # wait for one rather than say "nothing left" while there is room.
                        item_id = _next_free_item(
                            queue, annotator.pk, exclude=tried, now=now, skip_locked=False
                        )
                    if item_id is None:
                        return None
                    # The item is locked now; count again with a fresh snapshot.
                    if active_count(item_id) >= queue.overlap:
                        raise _ItemFull(item_id)
                    try:
                        with transaction.atomic():
                            return QueueAssignment.objects.create(
                                item_id=item_id,
                                annotator_id=annotator.pk,
                                leased_at=now,
                                expires_at=now + lease_for,
                            )
                    except IntegrityError:  # held before (released or expired): never twice
                        raise _ItemFull(item_id) from None
            except _ItemFull as full:
                tried.append(full.item_id)


class _ItemFull(Exception):
    def __init__(self, item_id: int) -> None:
        super().__init__(item_id)
        self.item_id = item_id


# Each order follows one of the queue item indexes.
_ITEM_ORDER: dict[str, str] = {
    Queue.Order.POSITION: "i.position, i.id",
    Queue.Order.UNCERTAIN: "i.uncertainty NULLS LAST, i.position, i.id",
}


def _next_free_item(
    queue: Queue,
    annotator_id: int,
    *,
    exclude: list[int],
    now: dt.datetime,
    skip_locked: bool = True,
) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT i.id FROM labeling_queueitem i
            WHERE i.queue_id = %s AND NOT (i.id = ANY(%s))
              AND NOT EXISTS (SELECT 1 FROM labeling_queueassignment a
                              WHERE a.item_id = i.id AND a.annotator_id = %s)
              AND (SELECT count(*) FROM labeling_queueassignment a
                   WHERE a.item_id = i.id
                     AND (a.status = 'submitted' OR (a.status = 'leased' AND a.expires_at > %s))
                  ) < %s
            ORDER BY {_ITEM_ORDER[queue.order]}
            LIMIT 1
            FOR UPDATE OF i {"SKIP LOCKED" if skip_locked else ""}
            """,
            [queue.pk, exclude, annotator_id, now, queue.overlap],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else None


def queue_assignment_release(*, queue: Queue, annotator: User | AbstractBaseUser) -> int | None:
    """Skip: give back the annotator's open lease in ``queue`` (it will not come back to
    them). Their labels so far are kept. Returns the trajectory id released, if any."""
    with transaction.atomic():
        mine = (
            QueueAssignment.objects.select_for_update()
            .select_related("item")
            .filter(
                item__queue=queue, annotator_id=annotator.pk, status=QueueAssignment.Status.LEASED
            )
            .first()
        )
        if mine is None:
            return None
        mine.status = QueueAssignment.Status.RELEASED
        mine.save(update_fields=["status"])
        return mine.item.trajectory_id


def queue_set_active(*, queue: Queue, active: bool) -> Queue:
    queue.is_active = active
    queue.save(update_fields=["is_active"])
    return queue
