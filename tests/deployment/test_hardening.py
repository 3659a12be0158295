"""Production guards, in process: probes, security headers, the upload limit, login
throttling, API throttling, a clear answer when the queue is down, and the admins'
status page."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.throttling import UserRateThrottle

from stepscope import health, queueing
from stepscope.middleware import CONTENT_SECURITY_POLICY
from trajectories.models import ImportBatch, Project

pytestmark = pytest.mark.services

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = REPO_ROOT / "templates"


def test_healthz_answers_any_host_without_touching_the_database(client: Client) -> None:
    # No django_db mark: any database access here would raise.
    response = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db(transaction=True)
def test_readyz_checks_database_migrations_broker_and_workers(
    client: Client, celery_worker: subprocess.Popen[bytes]
) -> None:
    response = client.get("/readyz", HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200, response.content
    checks = response.json()["checks"]
    assert checks["database"]["ok"] and checks["migrations"]["ok"] and checks["broker"]["ok"]
    # The test worker listens on both queues.
    assert checks["workers"]["per_queue"]["default"] >= 1
    assert checks["workers"]["per_queue"]["gpu"] >= 1

    required = client.get("/readyz?require=default,gpu").json()
    assert required["checks"]["workers"]["ok"] is True


@pytest.mark.django_db
def test_readyz_fails_when_a_required_queue_has_no_worker(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The probe waits its whole inspect timeout for replies (1 s); no worker of this
    # queue would answer in any.
    monkeypatch.setattr(health, "INSPECT_TIMEOUT", 0.1)
    response = client.get("/readyz?require=no-such-queue")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not ready"
    assert body["checks"]["workers"]["ok"] is False
    assert body["checks"]["database"]["ok"] is True


@pytest.mark.django_db
def test_pages_carry_security_headers(client: Client, owner: User, project: Project) -> None:
    client.force_login(owner)
    response = client.get(reverse("project-home", args=[project.slug]))
    assert response.status_code == 200
    policy = response.headers["Content-Security-Policy"]
    assert policy == CONTENT_SECURITY_POLICY
    script_src = policy.split("script-src")[1].split(";")[0]
    assert script_src.strip() == "'self'"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    # htmx is told never to evaluate attribute code or run scripts in swapped HTML.
    assert b'"allowEval": false' in response.content
    assert b'"allowScriptTags": false' in response.content


def test_no_template_holds_inline_script_or_event_handlers() -> None:
    """The Content-Security-Policy forbids inline scripts; a template that had one would
    silently stop working in the browser."""
    inline_script = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)
    handler = re.compile(r"\son[a-z]+\s*=", re.IGNORECASE)
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        text = template.read_text()
        if inline_script.search(text) or handler.search(text) or "javascript:" in text:
            offenders.append(str(template.relative_to(REPO_ROOT)))
    assert offenders == []


@pytest.mark.django_db
def test_an_upload_over_the_limit_is_refused_before_it_is_read(
    client: Client, owner: User, project: Project, settings: Any
) -> None:
    settings.STEPSCOPE_UPLOAD_MAX_BYTES = 1000
    client.force_login(owner)
    upload = SimpleUploadedFile("big.jsonl", b"x" * 5000)
    response = client.post(
        reverse("import-new", args=[project.slug]), {"format": "stepscope", "file": upload}
    )
    assert response.status_code == 413
    assert b"the limit is 0.0 MB" in response.content
    assert b"import_trajectories" in response.content
    assert not ImportBatch.objects.filter(project=project).exists()

    token, _ = Token.objects.get_or_create(user=owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    upload = SimpleUploadedFile("big.jsonl", b"x" * 5000)
    response = api.post(
        "/api/v1/imports/", {"project": project.slug, "format": "stepscope", "file": upload}
    )
    assert response.status_code == 413
    assert "STEPSCOPE_UPLOAD_MAX_BYTES" in response.json()["detail"]


@pytest.mark.django_db
def test_repeated_failed_logins_lock_that_username_only(client: Client, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    User.objects.create_user("victim", password="right-password-1")
    User.objects.create_user("colleague", password="right-password-2")
    for _ in range(3):
        response = client.post(reverse("login"), {"username": "victim", "password": "wrong"})
    assert response.status_code == 429
    assert b"Too many failed logins" in response.content
    # Locked even with the right password now ...
    response = client.post(reverse("login"), {"username": "victim", "password": "right-password-1"})
    assert response.status_code == 429
    # ... while a colleague behind the same address logs in.
    response = client.post(
        reverse("login"), {"username": "colleague", "password": "right-password-2"}
    )
    assert response.status_code == 302


@pytest.mark.django_db
def test_api_requests_over_the_rate_are_throttled(
    owner: User, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates = {"user": "3/minute", "anon": "3/minute"}
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", rates)
    token, _ = Token.objects.get_or_create(user=owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    statuses = [api.get("/api/v1/projects/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


@pytest.mark.django_db
def test_starting_a_job_with_the_broker_down_says_so(
    owner: User, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that does not answer: the API says 503 with the reason; nothing is left
    queued in the database."""
    from stepscope.celery import app

    # Nothing listens on port 9 (discard) here: connections are refused at once. Celery
    # reads this variable before any setting, in both test modes.
    monkeypatch.setenv("CELERY_BROKER_WRITE_URL", "redis://127.0.0.1:9/0")
    assert app.conf.broker_write_url == "redis://127.0.0.1:9/0"
    token, _ = Token.objects.get_or_create(user=owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    upload = SimpleUploadedFile("a.jsonl", b'{"id": "a", "task": "t", "steps": ["s"]}\n')
    response = api.post(
        "/api/v1/imports/", {"project": project.slug, "format": "stepscope", "file": upload}
    )
    assert response.status_code == 503, response.content
    assert queueing.MESSAGE.split(",")[0] in response.json()["detail"]
    assert not ImportBatch.objects.filter(project=project, status="queued").exists()


@pytest.mark.django_db
def test_a_push_with_the_broker_down_is_imported_and_its_follow_ups_logged(
    owner: User,
    project: Project,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """What a push queues after it commits (the search index, the statistics of the
    tables it grew) only costs speed when lost: the push answers 201 and says so in
    the log."""
    from stepscope.celery import app

    monkeypatch.setenv("CELERY_BROKER_WRITE_URL", "redis://127.0.0.1:9/0")
    assert app.conf.broker_write_url == "redis://127.0.0.1:9/0"
    # ``delay`` publishes through the app's connection pools, which an earlier test in
    # this process may have opened to the live broker: new ones are made on first use.
    monkeypatch.setattr(app, "_pool", None)
    monkeypatch.setattr(app.amqp, "_producer_pool", None)
    token, _ = Token.objects.get_or_create(user=owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    records = [
        {"id": f"r{n}", "task": f"task {n}", "steps": [{"content": f"s{i}"} for i in range(5)]}
        for n in range(100)
    ]
    with connection.cursor() as cursor:
        # Statistics that match the table as it is: a hundred trajectories are growth.
        cursor.execute("ANALYZE trajectories_trajectory")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/v1/imports/",
            {"project": project.slug, "trajectories": records},
            content_type="application/json",
        )
    assert response.status_code == 201, response.content
    assert response.json()["created_count"] == 100
    logged = [r.getMessage() for r in caplog.records if "not queued" in r.getMessage()]
    assert any(m.startswith(f"search index of project {project.pk}") for m in logged), logged
    assert any(m.startswith("statistics of ") for m in logged), logged


@pytest.mark.django_db
def test_status_page_is_for_staff_and_shows_queues_and_jobs(
    client: Client, owner: User, project: Project
) -> None:
    client.force_login(owner)
    response = client.get(reverse("admin-status"))
    assert response.status_code == 302  # to the admin login: the project admin is not staff
    staff = User.objects.create_user("ops", password="pw-ops-123456", is_staff=True)
    ImportBatch.objects.create(
        project=project, status=ImportBatch.Status.QUEUED, source_format="stepscope", file_name="a"
    )
    client.force_login(staff)
    response = client.get(reverse("admin-status"))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="queue-default"' in page and 'id="queue-gpu"' in page
    assert "answering" in page
    assert f'href="/p/{project.slug}/"' in page
