"""PostgreSQL advisory locks, each under a class of its own.

An advisory lock is named by two 32-bit keys; here the first is always one of
``LockClass`` and the second the id of the thing locked. Every lock in Stepscope is taken
through this module, so two kinds of lock can never share a name by accident (as a lock
keyed ``(queue, annotator)`` once could with an import's ``(7301, project)``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum

from django.db import connection


class LockClass(IntEnum):
    # One import per project at a time (the content-hash check and the COPY).
    IMPORT = 7301
    # One worker writes an export job's folder.
    EXPORT = 7302
    # One worker trains the demo policy.
    DEMO_TRAINING = 7303
    # One queue taker per annotator at a time (two tabs pressing n at once).
    QUEUE_TAKE = 7304
    # One assembler builds a live trace's trajectory at a time (keyed by LiveTrace id).
    LIVE_TRACE = 7311
    # One pass over a followed folder at a time (keyed by FollowSource id): the worker's
    # and an `import_trajectories --follow` on the same folder never import a file twice.
    FOLLOW_SOURCE = 7312


def xact_lock(lock_class: LockClass, key: int) -> None:
    """Wait for the lock; it is let go when the current transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [int(lock_class), key])


@contextmanager
def session_lock_try(lock_class: LockClass, key: int) -> Iterator[bool]:
    """Try the lock for this connection's session; yields whether it was taken, and lets
    it go on leaving if it was. A worker that dies loses its connection and the lock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [int(lock_class), key])
        (taken,) = cursor.fetchone()
    try:
        yield bool(taken)
    finally:
        if taken:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [int(lock_class), key])
