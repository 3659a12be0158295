"""Health endpoints for load balancers and orchestrators, and a status page for admins.

``/healthz``: the process answers (no database, no broker).
``/readyz``: the database answers, every migration is applied and the broker answers;
the Celery workers listening on each queue are reported, and ``?require=default,gpu``
makes a queue without a worker fail the check too. With a read replica configured, it
answers and is a standby, and how far its replay is behind is reported.
``/admin/status/``: queue depths, workers per queue and the jobs that are queued or
running, for staff.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu.exceptions import ChannelError

from stepscope import db_router
from stepscope.celery import app as celery_app

QUEUES = ("default", "gpu")
BROKER_TIMEOUT = 2.0
INSPECT_TIMEOUT = 1.0
# Once every migration is applied it stays applied until the next deploy restarts us.
_migrations_applied = False


class HealthMiddleware:
    """Answer the probes first, before the Host check: load balancers and orchestrators
    call them by an address that is not among ALLOWED_HOSTS."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == "/healthz":
            return healthz(request)
        if request.path == "/readyz":
            return readyz(request)
        return self.get_response(request)


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    required = [q for q in request.GET.get("require", "").split(",") if q]
    checks: dict[str, Any] = {}
    checks["database"] = _check(database_ok)
    checks["migrations"] = _check(migrations_applied) if checks["database"]["ok"] else _skip()
    if db_router.replica_configured():
        checks["replica"] = replica_check()
    checks["broker"] = _check(broker_ok)
    workers = workers_per_queue() if checks["broker"]["ok"] else {}
    checks["workers"] = {
        "ok": all(workers.get(queue) for queue in required),
        "per_queue": {queue: len(workers.get(queue, [])) for queue in QUEUES},
        "required": required,
    }
    ready = all(check["ok"] for check in checks.values())
    return JsonResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status=200 if ready else 503,
    )


def _check(probe: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        probe()
    except Exception as error:  # any failure means "not ready", said how
        return {"ok": False, "error": f"{type(error).__name__}: {error}"[:500]}
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _skip() -> dict[str, Any]:
    return {"ok": False, "error": "skipped: the database is not reachable"}


def database_ok() -> None:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")


def replica_check() -> dict[str, Any]:
    """The read replica answers and is a standby (not a promoted primary, whose data
    would drift from the primary's); how far its replay is behind the primary's WAL, in
    bytes, and whether replay is paused. Lag is reported, never a failure: pages read
    the replica whatever its lag, and a client that wrote reads the primary."""
    started = time.perf_counter()
    try:
        with connections[db_router.REPLICA].cursor() as cursor:
            cursor.execute(
                "SELECT pg_is_in_recovery(),"
                " CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() END,"
                " CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() END"
            )
            in_recovery, paused, replayed = cursor.fetchone()
        if not in_recovery:
            raise RuntimeError(
                "DATABASE_REPLICA_URL reaches a server that is not in recovery: a primary"
                " (a promoted replica?), whose data no longer follows DATABASE_URL's"
            )
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [replayed])
            behind = cursor.fetchone()[0]
    except Exception as error:  # any failure means "not ready", said how
        return {"ok": False, "error": f"{type(error).__name__}: {error}"[:500]}
    return {
        "ok": True,
        "ms": round((time.perf_counter() - started) * 1000, 1),
        "replay_paused": bool(paused),
        "behind_bytes": None if behind is None else max(0, int(behind)),
    }


def migrations_applied() -> None:
    global _migrations_applied
    if _migrations_applied:
        return
    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan[:5])
        raise RuntimeError(f"{len(plan)} migration(s) not applied: {names}")
    _migrations_applied = True


def broker_ok() -> None:
    with celery_app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT)


def workers_per_queue() -> dict[str, list[str]]:
    """Worker hostnames listening on each queue, from the workers' own replies."""
    replies = celery_app.control.inspect(timeout=INSPECT_TIMEOUT).active_queues() or {}
    per_queue: dict[str, list[str]] = {}
    for worker, queues in replies.items():
        for queue in queues or []:
            per_queue.setdefault(queue["name"], []).append(worker)
    return per_queue


def queue_depths() -> dict[str, int | None]:
    """Messages waiting in each queue (None when the broker does not answer)."""
    depths: dict[str, int | None] = {}
    try:
        with celery_app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT)
            channel = connection.default_channel
            for queue in QUEUES:
                try:
                    declared = channel.queue_declare(queue=queue, passive=True)
                except ChannelError:
                    # Nothing has declared the queue yet (no worker of it has started and
                    # nothing was sent to it): nothing waits in it. One such queue made
                    # every depth unknown.
                    depths[queue] = 0
                else:
                    depths[queue] = declared.message_count
    except Exception:  # the page says the broker is unreachable instead
        return dict.fromkeys(QUEUES)
    return depths


@staff_member_required
@never_cache
def status_page(request: HttpRequest) -> HttpResponse:
    from stepscope.jobs.active import jobs_active

    broker = _check(broker_ok)
    workers = workers_per_queue() if broker["ok"] else {}
    context = {
        "database": _check(database_ok),
        "broker": broker,
        "queues": [
            {"name": queue, "depth": depth, "workers": sorted(workers.get(queue, []))}
            for queue, depth in queue_depths().items()
        ],
        "jobs": jobs_active(),
    }
    return render(request, "stepscope/status.html", context)
