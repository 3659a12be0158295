"""Project events (an import done, a trajectory submitted, a run done, an export ready)
announced by the app where they happen to the listeners a higher app registers: the
``automation`` app turns each into webhook deliveries. A listener runs in the caller's
transaction, so what it records commits, or rolls back, with the event itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Every kind of event, with what a webhook's page says of it.
EVENT_KINDS: dict[str, str] = {
    "import.done": "An import (a file, a push, a followed folder's lines) finished.",
    "trajectory.submitted": "A person submitted their labels of a trajectory.",
    "queue.finished": "Every trajectory of a labeling queue has its labels.",
    "scoring_run.done": "A scoring run finished.",
    "judge_run.done": "A judge run finished.",
    "export.ready": "An export's files are ready to download.",
    "batch.version": "An export into a named batch became its new version (pin it as name@N).",
    "rule.fired": "A rule acted on trajectories that arrived.",
}

EventListener = Callable[[int, str, dict[str, Any]], None]
_LISTENERS: list[EventListener] = []


def event_listener_register(listener: EventListener) -> EventListener:
    """Call ``listener(project_id, kind, data)`` for every event (a decorator)."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)
    return listener


def event_emit(*, project_id: int, kind: str, data: dict[str, Any]) -> None:
    """Announce an event of ``project_id``; ``data`` is JSON (ids, names, counts). Call it
    inside the transaction that makes the event true."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    for listener in list(_LISTENERS):
        listener(project_id, kind, data)
