"""A training script's load on `make run`: one request at a time, each on a new
connection (what `requests.get` without a session does), pushing a trajectory's labels and
reading trajectories, against Django's development server on the embedded PostgreSQL, for
``--seconds`` (the issue's figure: 600).

    .venv/bin/python bench/script_load.py --seconds 600
    .venv/bin/python bench/script_load.py --seconds 120 --baseline   # also the old setting

It runs the server as `make run` does (``manage.py runserver``), once with today's
settings and, with ``--baseline``, once more with persistent connections
(``STEPSCOPE_DB_CONN_MAX_AGE=60``, what the development server had before), and prints per
minute: requests per second, refused or failed requests, and the database connections
the server holds. Every loop is bounded by the clock; the run stops by itself.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402

from accounts.services import api_token_create  # noqa: E402
from tests.deployment.stack import free_port  # noqa: E402
from tests.factories import trajectory_with_steps  # noqa: E402
from tests.waiting import wait_until  # noqa: E402
from trajectories.models import Membership  # noqa: E402
from trajectories.services import project_create  # noqa: E402

STEPS = 20
TRAJECTORIES = 200


@dataclass
class Minute:
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    connections: int = 0


def request(port: int, method: str, path: str, token: str, body: bytes = b"") -> int:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        client.request(method, path, body=body or None, headers=headers)
        response = client.getresponse()
        response.read()
        return response.status
    finally:
        client.close()


def server_connections(database: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        )
        (count,) = cursor.fetchone()
    return int(count)


def run_once(label: str, conn_max_age: str, seconds: float, ids: list[int], token: str) -> dict:
    port = free_port()
    env = {**os.environ, "STEPSCOPE_DEBUG": "0"}
    if conn_max_age:
        env["STEPSCOPE_DB_CONN_MAX_AGE"] = conn_max_age
    else:
        env.pop("STEPSCOPE_DB_CONN_MAX_AGE", None)
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    database = connection.settings_dict["NAME"]
    minutes: list[Minute] = []
    try:

        def up() -> bool:
            try:
                return request(port, "GET", "/healthz", token) == 200
            except OSError:
                return False

        if not wait_until(up, timeout=90):
            raise SystemExit("the development server did not start")
        start = time.monotonic()
        n = 0
        while (elapsed := time.monotonic() - start) < seconds:
            if int(elapsed // 60) >= len(minutes):
                if minutes:
                    minutes[-1].connections = server_connections(database)
                minutes.append(Minute())
            minute = minutes[-1]
            trajectory = ids[n % len(ids)]
            if n % 2:
                method, path, body = "GET", f"/api/v1/trajectories/{trajectory}/", b""
            else:
                labels = [
                    {"trajectory": trajectory, "index": i, "value": 1 if (i + n) % 3 else -1}
                    for i in range(STEPS)
                ]
                method, path = "POST", "/api/v1/labels/bulk/"
                body = json.dumps({"labels": labels}).encode()
            n += 1
            try:
                status = request(port, method, path, token, body)
            except OSError as error:
                minute.failed += 1
                minute.errors.append(type(error).__name__)
                continue
            if status in (200, 201):
                minute.ok += 1
            else:
                minute.failed += 1
                minute.errors.append(str(status))
        minutes[-1].connections = server_connections(database)
    finally:
        server.terminate()
        server.wait(timeout=30)
    total_s = min(seconds, time.monotonic() - start)
    for number, minute in enumerate(minutes, 1):
        span = min(60.0, total_s - 60 * (number - 1))
        print(
            f"{label} minute {number}: {minute.ok / span:6.1f} req/s, {minute.failed} failed"
            f" {sorted(set(minute.errors))[:3]}, {minute.connections} db connections held"
        )
    ok = sum(m.ok for m in minutes)
    failed = sum(m.failed for m in minutes)
    return {
        "run": label,
        "seconds": round(total_s, 1),
        "requests_per_s": round(ok / total_s, 1),
        "failed": failed,
        "peak_connections": max(m.connections for m in minutes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--baseline", action="store_true", help="also run with CONN_MAX_AGE=60")
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/script_load.py", *sys.argv[1:]]))
    slug = f"bench-script-{int(time.time())}"
    project = project_create(slug=slug, name="Script load bench")
    user = User.objects.create_user(f"{slug}-user", password="bench-password-1")
    Membership.objects.create(user=user, project=project, role=Membership.Role.ADMIN)
    ids = [
        trajectory_with_steps(project, [f"step {i} of {t}" for i in range(STEPS)]).pk
        for t in range(TRAJECTORIES)
    ]
    _, token = api_token_create(user=user, name="script")
    results = []
    try:
        results.append(run_once("now", "", args.seconds, ids, token))
        if args.baseline:
            results.append(run_once("CONN_MAX_AGE=60", "60", args.seconds, ids, token))
    finally:
        project.delete()
        user.delete()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
