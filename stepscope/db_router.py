"""Page reads on a PostgreSQL streaming replica, when one is configured.

With ``DATABASE_REPLICA_URL`` set, settings add ``DATABASES["replica"]``, this module's
:class:`ReplicaRouter` and :class:`ReplicaReadsMiddleware`; unset, everything stays on
``default`` and neither is installed.

What goes where:

- **Replica**: ORM reads made while a web process answers a safe request (``GET``,
  ``HEAD``, ``OPTIONS``) of a client that is not pinned: pages, HTMX fragments, API lists
  and details.
- **Primary** (``default``): every write; every read of an unsafe request (``POST``,
  ``PATCH``, ``PUT``, ``DELETE``); every read inside a transaction (``atomic``), so a
  transaction reads its own writes; every read of a request after it wrote (a ``GET``
  that saves its session, say); every read outside a request (Celery workers, management
  commands, the shell, migrations); and raw SQL on ``django.db.connection``, which is the
  primary's (raw reads that may go to the replica use :func:`read_connection`).
- **Read your writes**: an unsafe request, or a safe one that wrote, pins its client to
  the primary for ``STEPSCOPE_REPLICA_PIN_SECONDS`` (a signed cookie holding the end of
  the window), so the page a form redirects to, the next HTMX swap and a script's next
  ``GET`` see what it just wrote. The pin is per client (browser, or a script's cookie
  jar such as ``stepscope-client``'s), not per user; a client that keeps no cookies reads
  the replica as soon as its write is answered and may see it up to the replica's lag
  later.
- Migrations run only on ``default``; the replica receives them by replication.

docs/operating.md says how to set one up. This module imports no app.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse

REPLICA = "replica"
ROUTER = "stepscope.db_router.ReplicaRouter"
MIDDLEWARE = "stepscope.db_router.ReplicaReadsMiddleware"
# The cookie that pins a client to the primary: the end of its window (Unix time), signed.
PIN_COOKIE = "stepscope_primary"
_PIN_SALT = "stepscope.db_router.pin"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class _RequestReads:
    """How the request being answered may read; one per request, in a context variable
    (each thread of a web process has its own context)."""

    replica: bool
    wrote: bool = False


_request_reads: ContextVar[_RequestReads | None] = ContextVar(
    "stepscope_request_reads", default=None
)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def read_alias() -> str:
    """The database a read made now should use: the replica only inside a safe request
    of an unpinned client that has not written, outside any transaction."""
    reads = _request_reads.get()
    if reads is None or not reads.replica:
        return DEFAULT_DB_ALIAS
    if connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    return REPLICA


def read_connection() -> BaseDatabaseWrapper:
    """The connection for a raw SQL read that may be served by the replica (``with
    read_connection().cursor() as cursor``); ``django.db.connection`` is the primary's."""
    return connections[read_alias()]


def wrote() -> None:
    """Note a write of the request being answered: its later reads, and its client's
    next ones for the pin window, go to the primary."""
    reads = _request_reads.get()
    if reads is not None:
        reads.wrote = True
        reads.replica = False


class ReplicaRouter:
    """Django database router: reads where :func:`read_alias` says, writes and
    migrations on the primary."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str:
        return read_alias()

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        # Also asked for select_for_update() and get_or_create(), which read to write.
        wrote()
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        # Both aliases hold the same database.
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS


def pin_seconds() -> float:
    return float(settings.STEPSCOPE_REPLICA_PIN_SECONDS)


def pinned_until(request: HttpRequest) -> float | None:
    """The end of the request's client's pin window (Unix time), if its cookie carries a
    good signature."""
    value = request.get_signed_cookie(PIN_COOKIE, default=None, salt=_PIN_SALT)
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def pinned(request: HttpRequest, now: float | None = None) -> bool:
    """Whether the request's client wrote less than the pin window ago."""
    until = pinned_until(request)
    return until is not None and (time.time() if now is None else now) < until


def pin(response: HttpResponse, now: float | None = None) -> None:
    """Pin the client to the primary for the window, from now."""
    window = pin_seconds()
    if window <= 0:
        return
    until = (time.time() if now is None else now) + window
    response.set_signed_cookie(
        PIN_COOKIE,
        f"{until:.3f}",
        salt=_PIN_SALT,
        # Whole seconds, rounded up; the signed end of the window is what counts.
        max_age=int(window) + 1,
        httponly=True,
        samesite="Lax",
        secure=settings.SESSION_COOKIE_SECURE,
    )


class ReplicaReadsMiddleware:
    """Decides, per request, whether its reads may go to the replica, and pins a client
    that wrote. Installed (before the session and authentication middleware, so that
    their reads follow it too) only when a replica is configured."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        safe = request.method in SAFE_METHODS
        reads = _RequestReads(replica=safe and not pinned(request))
        token = _request_reads.set(reads)
        try:
            response = self.get_response(request)
        finally:
            _request_reads.reset(token)
        if not safe or reads.wrote:
            pin(response)
        return response
