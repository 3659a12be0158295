"""The retry policy of every job task.

Every task is safe to redeliver (``acks_late`` + ``reject_on_worker_lost``): a chunk
whose worker died runs again elsewhere, and its upserts and its once-only progress
update make the second run harmless. Database hiccups are retried with backoff; any other
error fails the job (the service records it) and is not retried. A chunk delivered
``MAX_CHUNK_ATTEMPTS`` times without finishing (its worker died each time) fails its job
instead of coming back for ever.
"""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError

TRANSIENT_ERRORS = (OperationalError, InterfaceError)

REDELIVERABLE: dict[str, Any] = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "autoretry_for": TRANSIENT_ERRORS,
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "max_retries": 5,
}

MAX_CHUNK_ATTEMPTS = 4
