"""Worker processes forked from one server process that has imported what they import,
instead of each started from scratch: importing torch and transformers took a worker that
loads a model about 7 s of CPU, and the kill tests start two such workers each.

The server imports only Django-free modules (torch, transformers, the scorers' model code)
and never sets Django up: each forked process gets its own environment first, then sets up
Django and Celery as a freshly started one would. It forks while single-threaded, as
Celery's prefork pool does after ``--preload``-style imports.

It runs as ``python -c "from tests.worker_forks import serve; serve()"``, reading one
request a line (JSON) on stdin and answering each with the forked process's pid."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

# What every Celery worker of the project imports (about 1.5 s of the 2.5 s of CPU a worker
# took to import all it needed): Django-free or, for Django's own modules, importable
# before settings are configured.
COMMON_MODULES = (
    "numpy",
    "scipy.special",
    "pyarrow",
    "psycopg",
    "redis",
    "httpx",
    "django.db.models",
    "django.http",
    "django.urls",
    "django.template",
    "kombu.transport.redis",
    "celery.apps.worker",
    "celery.concurrency.prefork",
    "celery.worker.consumer",
    "opentelemetry.trace",
    "opentelemetry.sdk.metrics",
)


def serve() -> None:
    """Fork one process a request until stdin closes. Children are reaped by the kernel
    (SIGCHLD ignored), so a dead worker leaves no zombie for its pid to linger as."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for module in COMMON_MODULES:
        importlib.import_module(module)
    for line in sys.stdin:
        request = json.loads(line)
        for module in request["preload"]:
            importlib.import_module(module)
        pid = os.fork()
        if pid == 0:
            _become(request)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


def _become(request: dict[str, Any]) -> None:
    """In the forked child: a session of its own (so that killing its group takes its pool
    children too), the request's environment, directory and log, then its code; never
    back into the server's loop."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        try:
            exec(compile(request["code"], "<worker>", "exec"), {"__name__": "__main__"})
            status = 0
        except SystemExit as exit:
            status = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


class ForkedProcess:
    """A process the server forked: not this process's child, so it is waited for through
    a pidfd (readable once the process has exited) rather than ``waitpid``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        try:
            self._fd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._fd = None

    def running(self) -> bool:
        return not self._exited(0)

    def wait(self, timeout: float) -> None:
        """Return once the process has exited; ``subprocess.TimeoutExpired`` after
        ``timeout`` seconds."""
        if not self._exited(timeout):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)

    def _exited(self, timeout: float) -> bool:
        if self._fd is None:
            return True
        readable, _, _ = select.select([self._fd], [], [], timeout)
        if readable:
            os.close(self._fd)
            self._fd = None
        return bool(readable)


class ForkServer:
    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [sys.executable, "-c", "from tests.worker_forks import serve; serve()"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def fork(
        self, code: str, *, env: dict[str, str], cwd: Path, log: Path, preload: tuple[str, ...]
    ) -> ForkedProcess:
        """A process running ``code`` (as ``python -c`` would) with ``env`` in ``cwd``,
        its output appended to ``log``, forked once the server has imported ``preload``."""
        request = {
            "code": code,
            "env": env,
            "cwd": str(cwd),
            "log": str(log),
            "preload": list(preload),
        }
        assert self._process.stdin is not None and self._process.stdout is not None
        with self._lock:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            answer = self._process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork server exited ({self._process.wait()})")
        return ForkedProcess(int(answer))

    def close(self) -> None:
        # Killed rather than let go by closing its stdin: it holds nothing, and its own
        # exit (an interpreter with torch) kept this process's exit waiting about a second.
        self._process.kill()
        self._process.wait()


_SERVER: list[ForkServer] = []


def fork_server(cwd: Path) -> ForkServer:
    """This process's fork server, started on first use and closed when it exits."""
    if not _SERVER:
        # Unbuffered from the start: the forked workers keep the server's stdout and
        # stderr objects, and end by SIGKILL, which would lose what a buffer still held.
        server = ForkServer(cwd, {**os.environ, "PYTHONUNBUFFERED": "1"})
        _SERVER.append(server)
        atexit.register(server.close)
    return _SERVER[0]
