"""Waiting for something another process does (a Celery worker, a server): poll a
condition often until it holds or a deadline passes. Never a fixed sleep: a test that
sleeps waits too long on a quiet machine and not long enough on a busy one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trajectories.models import ImportBatch

POLL_SECONDS = 0.05


def wait_until(condition: Callable[[], bool], timeout: float, poll: float = POLL_SECONDS) -> bool:
    """True as soon as ``condition()`` holds; False once ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def import_finished(batch_id: int, timeout: float = 90) -> ImportBatch:
    """The import batch once a worker has finished it (done, failed or cancelled)."""
    from trajectories.models import ImportBatch

    if not wait_until(
        lambda: (
            ImportBatch.objects.filter(pk=batch_id).exclude(status__in=ImportBatch.ACTIVE).exists()
        ),
        timeout,
    ):
        status = ImportBatch.objects.get(pk=batch_id).status
        raise AssertionError(f"import {batch_id} still {status} after {timeout}s")
    return ImportBatch.objects.get(pk=batch_id)
