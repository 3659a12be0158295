"""The deployed shape, as real processes (tests/deployment/stack.py): gunicorn and one
Celery worker per queue, started with docker-compose.yml's commands and configured by
the environment alone. Then the faults an operator meets: PostgreSQL restarting while
annotators post labels, and the broker going away and coming back.

``make test`` runs the stack on private embedded servers; ``make test-system`` runs the
first test against the system PostgreSQL and Redis as well."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.databases import template_dump
from tests.deployment.stack import Browserless, Stack
from tests.waiting import wait_until

# One worker runs the whole module: its stack is a module fixture.
pytestmark = [pytest.mark.stack, pytest.mark.xdist_group("stack")]

PASSWORD = "stack-password-1"
ANNOTATORS = 6

# Where the server has pgvector (the embedded one has), each import's trajectories are
# embedded on the gpu worker as they arrive: loading the embedding model and embedding
# them kept that worker busy for ~20 s of CPU while these tests ran, for nothing they
# check. tests/discovery/test_semantic.py checks that a worker embeds what arrives.
QUIET = {"STEPSCOPE_EMBED_ON_ARRIVAL": "0"}

SETUP = """
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token
from labeling.models import LabelSchema
from trajectories import synthetic
from labeling.services import queue_create
from trajectories.models import Membership
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create, trajectory_records_import

project = project_create(slug="ops", name="Operations")
# Hashed once for every user: the deployed hasher takes half a second a password.
password = make_password(PASSWORD)
owner = User.objects.create(username="owner", password=password)
Membership.objects.create(user=owner, project=project, role=Membership.Role.ADMIN)
sessions = {}
for n in range(ANNOTATORS):
    user = User.objects.create(username=f"ann{n}", password=password)
    Membership.objects.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    client = Client()
    client.force_login(user)
    sessions[user.username] = client.cookies["sessionid"].value
records = list(synthetic.rollouts(tasks=5, seed=3))
trajectory_records_import(project=project, user=owner, records=records)
queue = queue_create(
    project=project, name="ops", created_by=owner, filters=TrajectoryFilters(),
    overlap=ANNOTATORS, lease_seconds=3600,
)
result = {
    "queue": queue.pk,
    "token": Token.objects.create(user=owner).key,
    "schema": LabelSchema.objects.get(project=project).pk,
    "sessions": sessions,
}
"""


@pytest.fixture(scope="module")
def stack(django_db_setup: None) -> Iterator[Stack]:
    # A short root: Unix socket paths must stay under 108 bytes.
    root = Path(f"/tmp/ss-stack-{uuid.uuid4().hex[:8]}")
    root.mkdir()
    # Its database is the tests' migrated template: migrating it there took most of a
    # minute, and the suite migrates the template once per change of the migrations.
    running = Stack(root, database_dump=root / "template.sql")
    running.env.update(QUIET)
    try:
        template_dump(root / "template.sql")
        running.up()
        running.wait_ready()
        yield running
    finally:
        running.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def data(stack: Stack) -> dict[str, object]:
    code = SETUP.replace("PASSWORD", repr(PASSWORD)).replace("ANNOTATORS", str(ANNOTATORS))
    result = stack.django(code)
    assert isinstance(result, dict)
    return result


def multipart(fields: dict[str, str], name: str, content: bytes) -> tuple[str, bytes]:
    boundary = uuid.uuid4().hex
    parts = []
    for key, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'
        )
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    )
    body = "".join(parts).encode() + head.encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", body


def api(
    stack: Stack, token: str, method: str, path: str, body: bytes = b"", content_type: str = ""
) -> tuple[int, dict[str, object]]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=60)
    headers = {"Authorization": f"Token {token}"}
    if content_type:
        headers["Content-Type"] = content_type
    conn.request(method, path, body=body or None, headers=headers)
    response = conn.getresponse()
    text = response.read().decode()
    return response.status, (json.loads(text) if text.startswith("{") else {"text": text})


def upload_import(stack: Stack, token: str, tasks: int, seed: int) -> tuple[int, dict[str, object]]:
    from trajectories import synthetic

    records = synthetic.rollouts(tasks=tasks, seed=seed)
    lines = "".join(json.dumps(record) + "\n" for record in records)
    content_type, body = multipart(
        {"project": "ops", "format": "stepscope"}, f"seed{seed}.jsonl", lines.encode()
    )
    return api(stack, token, "POST", "/api/v1/imports/", body, content_type)


def test_web_and_one_worker_per_queue_serve_pages_imports_and_exports(
    stack: Stack, data: dict[str, object]
) -> None:
    serves_pages_imports_and_exports(stack, str(data["token"]))


def serves_pages_imports_and_exports(stack: Stack, token: str) -> None:
    ready = stack.wait_ready("default,gpu")
    assert ready["checks"]["workers"]["per_queue"] == {"default": 1, "gpu": 1}

    owner = Browserless("127.0.0.1", stack.port, "owner", PASSWORD)
    owner.login()
    status, headers, page = owner.request("GET", "/p/ops/")
    assert status == 200 and "Operations" in page
    assert "script-src 'self'" in headers["content-security-policy"]
    # Static files come from the app itself (whitenoise), not a separate server.
    status, _, css = owner.request("GET", "/static/stepscope/stepscope.css")
    assert status == 200 and "{" in css

    # An upload imported by the default worker.
    status, batch = upload_import(stack, token, tasks=3, seed=11)
    assert status == 202, batch

    def imported() -> bool:
        _, body = api(stack, token, "GET", f"/api/v1/imports/{batch['id']}/")
        return body.get("status") == "done"

    assert wait_until(imported, timeout=120), stack.log("worker-default")

    # An export written by the default worker.
    export_request = json.dumps(
        {"project": "ops", "format": "stepscope", "labels": "human:majority", "neutral": "drop"}
    ).encode()
    status, job = api(stack, token, "POST", "/api/v1/exports/", export_request, "application/json")
    assert status in (201, 202), job

    def exported() -> bool:
        _, body = api(stack, token, "GET", f"/api/v1/exports/{job['id']}/")
        return body.get("status") == "done"

    assert wait_until(exported, timeout=120), stack.log("worker-default")

    # Only the gpu worker listens on the gpu queue: a round trip through it.
    echoed = stack.django(
        "from stepscope.celery import ping\n"
        "result = ping.apply_async(args=[7], queue='gpu').get(timeout=60)['value']"
    )
    assert echoed == 7


def test_labels_survive_a_postgres_restart_in_the_middle_of_posting(
    stack: Stack, data: dict[str, object]
) -> None:
    """Annotators take trajectories from a queue and label them while PostgreSQL
    restarts. Every request is answered with 200 or a clean 503 (never a 500 or a hang);
    a client sends again what was refused, as the page lets a user do; in the end every
    acknowledged label is stored. Each annotator labels until the restart is over and
    then takes, labels and submits one more trajectory."""
    schema = str(data["schema"])
    queue = str(data["queue"])
    statuses: list[int] = []
    acknowledged: set[tuple[str, int]] = set()
    lock = threading.Lock()
    restart_at = threading.Event()
    restarted = threading.Event()
    labels_each = 12

    def send(
        user: Browserless, method: str, path: str, body: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], str]:
        for _ in range(80):
            try:
                answer = user.request(method, path, body, htmx=True)
            except OSError:
                answer = (0, {}, "")
            with lock:
                statuses.append(answer[0])
            if answer[0] not in (0, 503):
                return answer
            time.sleep(0.25)
        raise AssertionError(f"{method} {path} never got through")

    # Everyone is signed in before the restart can begin: the test is about labels
    # posted across the restart, and a sign-in refused with 503 would end a thread
    # early. Their sessions come from the setup (the sign-in form is the other tests'):
    # six sign-ins, each a password hashed by the deployed hasher, took seconds here.
    sessions = data["sessions"]
    assert isinstance(sessions, dict)
    users = []
    for n in range(ANNOTATORS):
        user = Browserless("127.0.0.1", stack.port, f"ann{n}", PASSWORD)
        user.cookies["sessionid"] = sessions[f"ann{n}"]
        status, _, page = user.request("GET", "/p/ops/")  # and its CSRF cookie
        assert status == 200 and "Operations" in page and "csrftoken" in user.cookies
        users.append(user)

    def annotate(n: int) -> None:
        user = users[n]
        labelled = 0
        taken_after_restart = False
        while labelled < labels_each or not taken_after_restart:
            taken_after_restart = restarted.is_set()
            status, headers, _ = send(user, "POST", f"/q/{queue}/next/", {})
            target = headers.get("hx-redirect", "")
            assert status == 204 and target.startswith("/t/"), (status, target)
            _, _, page = send(user, "GET", target)
            for step in map(int, re.findall(r'data-row data-step="(\d+)"', page)):
                body = {"value": ("1", "-1", "0")[(n + step) % 3], "schema": schema, "queue": queue}
                status, _, text = send(user, "POST", f"/steps/{step}/label/", body)
                assert status == 200, text[:300]
                with lock:
                    acknowledged.add((f"ann{n}", step))
                labelled += 1
                if labelled == labels_each // 3:
                    restart_at.set()
            trajectory = target.split("/")[2]
            send(
                user,
                "POST",
                f"/t/{trajectory}/submit/",
                {"queue": queue, "finish_reason": "give_up"},
            )

    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            annotate(n)
        except BaseException as error:  # reported below, with the others
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(ANNOTATORS)]
    for thread in threads:
        thread.start()
    try:
        assert restart_at.wait(timeout=180), (
            f"labelling never got going: {Counter(statuses)} {errors}"
        )
        stack.postgres_restart()
    finally:
        restarted.set()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []

    answers = Counter(statuses)
    assert set(answers) <= {200, 204, 302, 503}, f"unexpected answers: {answers}"
    stored = stack.django(
        "from labeling.models import StepLabel\n"
        "result = sorted([l.annotator.username, l.step_id] for l in"
        " StepLabel.objects.filter(annotator__username__startswith='ann')"
        ".select_related('annotator'))"
    )
    assert sorted(list(pair) for pair in acknowledged) == stored
    assert len(stored) >= ANNOTATORS * labels_each
    assert stack.wait_ready()["checks"]["database"]["ok"]


def test_without_the_broker_pages_and_labels_work_and_queued_jobs_resume(
    stack: Stack, data: dict[str, object]
) -> None:
    token = str(data["token"])
    schema = str(data["schema"])
    # No default worker: the next import waits in the broker. It has nothing to finish.
    stack.worker_stop("default", kill=True)
    status, waiting = upload_import(stack, token, tasks=2, seed=21)
    assert status == 202, waiting

    stack.redis_stop()
    try:
        annotator = Browserless("127.0.0.1", stack.port, "ann0", PASSWORD)
        annotator.login()
        status, _, page = annotator.request("GET", "/p/ops/")
        assert status == 200 and "Operations" in page
        queue = str(data["queue"])
        status, headers, _ = annotator.request("POST", f"/q/{queue}/next/", {}, htmx=True)
        assert status == 204, status
        _, _, page = annotator.request("GET", headers["hx-redirect"])
        step = re.findall(r'data-row data-step="(\d+)"', page)[0]
        body = {"value": "1", "schema": schema, "queue": queue}
        status, _, _ = annotator.request("POST", f"/steps/{step}/label/", body, htmx=True)
        assert status == 200
        # Starting a job says the queue is unavailable, at once and in words.
        started = time.monotonic()
        status, refused = upload_import(stack, token, tasks=1, seed=22)
        assert status == 503, refused
        assert "job queue is unavailable" in str(refused["detail"])
        assert time.monotonic() - started < 15
        status, text = stack.get("/readyz")
        assert status == 503 and json.loads(text)["checks"]["broker"]["ok"] is False
    finally:
        stack.redis_start()

    stack.worker_start("default")

    def resumed() -> bool:
        _, body = api(stack, token, "GET", f"/api/v1/imports/{waiting['id']}/")
        return body.get("status") == "done"

    assert wait_until(resumed, timeout=120), stack.log("worker-default")
    # The refused import left nothing behind.
    queued = stack.django(
        "from trajectories.models import ImportBatch\n"
        "result = ImportBatch.objects.filter(status='queued').count()"
    )
    assert queued == 0


if os.environ.get("DATABASE_URL"):
    # `make test-system`: the same processes against the system PostgreSQL and Redis.

    def test_the_same_processes_run_against_external_servers(django_db_setup: None) -> None:
        import psycopg

        database_url = os.environ["DATABASE_URL"]
        base = database_url.rsplit("/", 1)[0]
        name = f"stepscope_stack_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        # Its own Redis database, so the test suite's workers never see these tasks.
        broker = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
        broker = broker.rsplit("/", 1)[0] + "/3"
        root = Path(f"/tmp/ss-ext-{uuid.uuid4().hex[:8]}")
        root.mkdir()
        external = Stack(
            root,
            database_url=f"{base}/{name}",
            broker_url=broker,
            database_dump=root / "template.sql",
        )
        external.env.update(QUIET)
        try:
            template_dump(root / "template.sql")
            external.up()
            setup = SETUP.replace("PASSWORD", repr(PASSWORD)).replace("ANNOTATORS", "1")
            token = external.django(setup)["token"]
            serves_pages_imports_and_exports(external, token)
        finally:
            external.down()
            shutil.rmtree(root, ignore_errors=True)
            with psycopg.connect(base + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
