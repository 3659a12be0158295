"""What happens when the broker is down: starting a job says so at once instead of
hanging or failing with a traceback; pages and labels never need the broker."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

BROKER_TIMEOUT = 2.0
MESSAGE = (
    "The job queue is unavailable (the broker does not answer), so the job was not"
    " started. Pages and labels keep working; start it again once the queue is back."
)


class QueueUnavailable(RuntimeError):
    def __init__(self, detail: str = "") -> None:
        super().__init__(MESSAGE + (f" ({detail})" if detail else ""))


def broker_require() -> None:
    """Raise ``QueueUnavailable`` unless the broker answers within ``BROKER_TIMEOUT``.
    Job services call it before writing a job row, so a job is never left queued
    in the database with no message in the broker."""
    from stepscope.celery import app

    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT)
    except Exception as error:  # kombu raises several kinds; all mean "down"
        raise QueueUnavailable(type(error).__name__) from error


def send_if_up(task: Any, *args: Any, what: str) -> bool:
    """Queue ``task`` where a broker that is down costs only speed (an index, statistics
    that would otherwise come later): then it is logged, with ``what`` was not queued,
    and nothing is raised. Whether it was queued."""
    try:
        task.delay(*args)
    except QueueUnavailable as error:
        logger.warning("%s not queued: %s", what, error)
        return False
    return True
