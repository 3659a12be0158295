"""Page reads on a real PostgreSQL streaming replica (stepscope/db_router.py).

A private primary and its replica made by ``pg_basebackup -R`` on loopback
(tests/stepscope/replica_pair.py), gunicorn configured by the environment alone as
docs/operating.md says. With the replica's replay paused it lags the primary, which
shows where each read went: a page or API read that misses a write the primary holds
was served by the replica."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from rest_framework.authtoken.models import Token

from stepscope.db_router import PIN_COOKIE
from tests.deployment.stack import Stack
from tests.stepscope.replica_pair import ReplicaPair
from tests.waiting import wait_until
from trajectories.models import Project

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

PIN_SECONDS = 5
BEFORE = "Demo"
AFTER = "Renamed on the primary"


@dataclass
class Deployment:
    pair: ReplicaPair
    stack: Stack
    token: str
    sessions: list[str]

    def client(self, session: str) -> httpx.Client:
        """A client of the owner with its own cookie jar: a page session and the API token
        (the API reads the token, the pages the session)."""
        return httpx.Client(
            base_url=self.stack.url,
            cookies={"sessionid": session},
            headers={"Authorization": f"Token {self.token}"},
            timeout=30,
        )


def _sessions(user: User, count: int) -> list[str]:
    """Signed-in sessions of ``user``, written to the test database (and so into the
    pair's copy of it) without a login request, which would pin its client."""
    keys = []
    for _ in range(count):
        client = Client()
        client.force_login(user)
        keys.append(client.cookies["sessionid"].value)
    return keys


@pytest.fixture
def deployment(owner: User, project: Project) -> Iterator[Deployment]:
    token = Token.objects.create(user=owner).key
    sessions = _sessions(owner, 2)
    pair = ReplicaPair()
    root = Path(tempfile.mkdtemp(prefix="stepscope-replica-web-"))
    stack = Stack(
        root,
        database_url=pair.url("primary"),
        broker_url=settings.CELERY_BROKER_URL,
        web_workers=1,
    )
    stack.env.update(
        DATABASE_REPLICA_URL=pair.url("replica"),
        STEPSCOPE_REPLICA_PIN_SECONDS=str(PIN_SECONDS),
        # The sessions were signed in by this process.
        STEPSCOPE_SECRET_KEY=settings.SECRET_KEY,
        STEPSCOPE_BROKER_KEY_PREFIX=os.environ["STEPSCOPE_BROKER_KEY_PREFIX"],
    )
    try:
        # gunicorn needs no database to start: both start at once.
        with ThreadPoolExecutor(1) as pool:
            made = pool.submit(pair.start, connection.settings_dict)
            stack.web_start()
            made.result()
        yield Deployment(pair, stack, token, sessions)
    finally:
        stack.down()
        pair.stop()


def _page_name(client: httpx.Client) -> str:
    response = client.get("/p/demo/")
    assert response.status_code == 200, response.text[:500]
    match = re.search(r"<h1>([^<]*)</h1>", response.text)
    assert match, response.text[:500]
    return match[1]


def _api_name(client: httpx.Client) -> str:
    response = client.get("/api/v1/projects/demo/")
    assert response.status_code == 200, response.text[:500]
    return str(response.json()["name"])


def _api_list_names(client: httpx.Client) -> list[str]:
    response = client.get("/api/v1/projects/")
    assert response.status_code == 200, response.text[:500]
    return [row["name"] for row in response.json()]


def test_pages_read_the_replica_and_a_writer_reads_its_writes_on_the_primary(
    deployment: Deployment,
) -> None:
    pair, stack = deployment.pair, deployment.stack
    writer = deployment.client(deployment.sessions[0])
    reader = deployment.client(deployment.sessions[1])
    assert _page_name(writer) == _page_name(reader) == BEFORE
    assert PIN_COOKIE not in writer.cookies  # reads pin nobody

    pair.replay_pause()
    written = writer.patch("/api/v1/projects/demo/", json={"name": AFTER})
    written_at = time.monotonic()
    # The write went to the primary: the replica is read-only, and lags now.
    assert written.status_code == 200, written.text[:500]
    assert PIN_COOKIE in writer.cookies

    # The writer, pinned to the primary, reads its write on the page and in the API.
    assert _page_name(writer) == AFTER
    assert _api_name(writer) == AFTER
    assert time.monotonic() - written_at < PIN_SECONDS, "too slow to be inside the window"

    # Another client of the same user reads the replica, which has not replayed it.
    assert _page_name(reader) == BEFORE
    assert _api_name(reader) == BEFORE
    assert _api_list_names(reader) == [BEFORE]

    # Outside a request (a management command, a Celery worker) reads the primary.
    shell = stack.run(
        sys.executable,
        "manage.py",
        "shell",
        "-c",
        "from trajectories.models import Project; print(Project.objects.get(slug='demo').name)",
    )
    assert shell.strip().splitlines()[-1] == AFTER

    # /readyz reports the replica: a standby, paused, behind the primary.
    replica = json.loads(stack.get("/readyz")[1])["checks"]["replica"]
    assert replica["ok"] and replica["replay_paused"] and replica["behind_bytes"] > 0, replica

    # The window ends: the writer's reads go back to the replica, which still lags.
    assert wait_until(lambda: _api_name(writer) == BEFORE, PIN_SECONDS + 30, poll=0.2)
    assert time.monotonic() - written_at >= PIN_SECONDS - 0.5
    assert _page_name(writer) == BEFORE

    # Replay resumes: the replica catches up, and every client reads the write.
    pair.replay_resume()
    assert wait_until(pair.caught_up, 30)
    assert _page_name(reader) == _api_name(reader) == _page_name(writer) == AFTER
