"""Cancelling an import: before a worker takes it, and while it runs (nothing of it
stays, since an import is one transaction), from the page and the API."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from tests.factories import MembershipFactory, UserFactory
from tests.waiting import wait_until
from trajectories import services
from trajectories.models import ImportBatch, Membership, Project, Trajectory
from trajectories.services import imports

HTMX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


def record(n: int) -> bytes:
    steps = [{"content": f"step {i} of {n}"} for i in range(3)]
    return (json.dumps({"id": f"r{n}", "task": f"task {n}", "steps": steps}) + "\n").encode()


def queued_upload(project: Project, user: User) -> ImportBatch:
    upload = SimpleUploadedFile("few.jsonl", record(1) + record(2))
    return services.import_upload_start(
        project=project, user=user, source_format="stepscope", upload=upload
    )


@pytest.mark.django_db
def test_a_cancelled_queued_import_never_runs(
    client: Client, project: Project, researcher: User, django_capture_on_commit_callbacks: Any
) -> None:
    # The task is not sent (no on-commit callbacks run): the batch waits, queued.
    batch = queued_upload(project, researcher)
    client.force_login(researcher)
    page = client.get(f"/imports/{batch.pk}/").content.decode()
    assert "Cancel the import" in page

    response = client.post(f"/imports/{batch.pk}/cancel/", headers=HTMX)
    assert response.status_code == 200
    assert "Cancelled: nothing from this file was imported." in response.content.decode()
    assert "every 1s" not in response.content.decode()

    # The worker's run, when it comes, leaves it as it is and drops the upload.
    ran = services.import_batch_run(batch_id=batch.pk)
    assert ran.status == ImportBatch.Status.CANCELLED
    assert not Trajectory.objects.filter(project=project).exists()
    assert not Path(batch.stored_path).exists()


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_a_running_import_and_nothing_stays(
    project: Project, researcher: User, tmp_path: Path
) -> None:
    # The file is a pipe this test writes into, so the import is certainly running, with
    # rows written inside its transaction, when the cancel comes.
    fifo = tmp_path / "stream.jsonl"
    os.mkfifo(fifo)
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["batch"] = services.trajectory_import(
                project=project, source_format="stepscope", path=fifo, user=researcher
            )
        finally:
            connection.close()

    importer = threading.Thread(target=run)
    importer.start()
    written = 0
    out = fifo.open("wb")
    try:

        def write(count: int) -> bool:
            nonlocal written
            try:
                out.write(b"".join(record(written + i) for i in range(count)))
                out.flush()
            except BrokenPipeError:
                return False  # the importer stopped reading
            written += count
            return True

        write(2500)  # more than one chunk: the first is written and its progress shown
        assert wait_until(
            lambda: ImportBatch.objects.filter(project=project, processed_count__gt=0).exists(),
            timeout=60,
        )
        batch = ImportBatch.objects.get(project=project)
        assert services.import_batch_cancel(batch=batch).status == ImportBatch.Status.CANCELLED
        # The importer sees the cancel when it next writes its progress; until then it
        # keeps reading what comes.
        assert wait_until(lambda: not write(200) or not importer.is_alive(), timeout=60)
    finally:
        # A write the importer stopped reading leaves its bytes in the buffer, and closing
        # flushes them again into the broken pipe.
        with contextlib.suppress(BrokenPipeError):
            out.close()
    importer.join(timeout=60)

    # The pipe was open when the cancel came, so the import could not have ended by
    # itself: had the cancel not stopped it, it would have finished at the pipe's end.
    # (How much more it read first depends on where it was: none, if its next progress
    # write came before this test's next write.)
    assert result["batch"].status == ImportBatch.Status.CANCELLED
    assert not Trajectory.objects.filter(project=project).exists()
    batch.refresh_from_db()
    assert batch.status == ImportBatch.Status.CANCELLED


@pytest.mark.django_db
def test_api_cancels_for_researchers_only(
    project: Project, researcher: User, django_capture_on_commit_callbacks: Any
) -> None:
    batch = queued_upload(project, researcher)
    annotator = UserFactory.create()
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    api = APIClient()
    api.force_authenticate(annotator)
    assert api.post(f"/api/v1/imports/{batch.pk}/cancel/").status_code == 403
    api.force_authenticate(UserFactory.create())
    assert api.post(f"/api/v1/imports/{batch.pk}/cancel/").status_code == 404

    api.force_authenticate(researcher)
    response = api.post(f"/api/v1/imports/{batch.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    # A finished import stays as it ended.
    assert api.post(f"/api/v1/imports/{batch.pk}/cancel/").json()["status"] == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_a_cancel_after_the_last_check_still_rolls_the_import_back(
    project: Project, researcher: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's result is written in the import's own commit, only while the batch is
    still active: a cancel that lands after the last progress check (here, from another
    connection, once every row is written) leaves nothing of the import either."""
    real_link_parents = imports.link_parents

    def link_parents_then_cancel(project_id: int, children: list[tuple[int, str]]) -> None:
        real_link_parents(project_id, children)
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            other.execute(
                "UPDATE trajectories_importbatch SET status = 'cancelled', finished_at = now()"
                " WHERE project_id = %s AND status IN ('queued', 'running')",
                [project_id],
            )

    monkeypatch.setattr(imports, "link_parents", link_parents_then_cancel)
    records = [{"id": f"r{n}", "task": f"task {n}", "steps": [{"content": "x"}]} for n in range(3)]
    batch = services.trajectory_records_import(project=project, records=records, user=researcher)

    assert batch.status == ImportBatch.Status.CANCELLED
    assert not Trajectory.objects.filter(project=project).exists()
    batch.refresh_from_db()
    assert batch.status == ImportBatch.Status.CANCELLED
    assert batch.created_count == 0


@pytest.mark.django_db(transaction=True)
def test_a_finished_import_and_its_result_are_one_commit(
    project: Project, researcher: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen from another connection at the moment the import's transaction commits, the
    trajectories and the batch's result are there together (no batch left running with
    its rows in, nor a done batch without them)."""
    seen: list[tuple[int, str]] = []
    real_commit = connection.commit

    def commit_and_look() -> None:
        real_commit()
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            row = other.execute(
                "SELECT (SELECT count(*) FROM trajectories_trajectory WHERE project_id = %s),"
                " (SELECT status FROM trajectories_importbatch WHERE project_id = %s"
                " ORDER BY id DESC LIMIT 1)",
                [project.pk, project.pk],
            ).fetchone()
        assert row is not None
        seen.append((row[0], row[1]))

    monkeypatch.setattr(connection, "commit", commit_and_look)
    records = [{"id": f"r{n}", "task": f"task {n}", "steps": [{"content": "x"}]} for n in range(3)]
    batch = services.trajectory_records_import(project=project, records=records, user=researcher)

    assert batch.status == ImportBatch.Status.DONE
    # Every commit after the batch's own creation shows both or neither.
    assert (3, ImportBatch.Status.DONE) in seen
    assert all(status == ImportBatch.Status.DONE for count, status in seen if count), seen
