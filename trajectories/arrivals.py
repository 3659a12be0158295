"""The "arrived" hook: trajectories that are new or grew (an import or a push, a followed
folder's new lines, a live trace assembled) are announced, once their transaction has
committed, to the listeners a higher app registers (``automation`` runs its rules on
them). Announcing costs nothing where no listener is registered, and a listener is
expected to hand the work to a worker, so an arrival is not slowed by it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import transaction

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Arrival:
    """What arrived in one commit: the trajectories by id, or, for an import (which may
    hold millions), its batch, whose trajectories are those it created."""

    project_id: int
    trajectory_ids: tuple[int, ...] = ()
    import_batch_id: int | None = None
    # Where they came from, for the listeners' logs: import, push, live, follow.
    source: str = ""


ArrivalListener = Callable[[Arrival], None]
_LISTENERS: list[ArrivalListener] = []


def arrival_listener_register(listener: ArrivalListener) -> ArrivalListener:
    """Call ``listener`` after each commit that brought trajectories (a decorator)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)
    return listener


def trajectories_arrived(
    *,
    project_id: int,
    trajectory_ids: Sequence[int] = (),
    import_batch_id: int | None = None,
    source: str = "",
) -> None:
    """Announce new or grown trajectories once the caller's transaction commits (at once
    outside one). A listener that fails is logged; the arrival has been written."""
    if not _LISTENERS or (not trajectory_ids and import_batch_id is None):
        return
    arrival = Arrival(project_id, tuple(trajectory_ids), import_batch_id, source)

    def announce() -> None:
        for listener in list(_LISTENERS):
            try:
                listener(arrival)
            except Exception:
                logger.exception("arrival listener %r failed", listener)

    transaction.on_commit(announce)
