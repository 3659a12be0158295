"""Imports from the browser and the API: queued on a real Celery worker, with status,
errors and permissions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import REALDATA
from tests.waiting import import_finished, wait_until
from trajectories.models import ImportBatch, Project, Trajectory

PROCESSBENCH = REALDATA / "processbench" / "gsm8k.json"


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


def api_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_upload_page_imports_on_a_worker(
    client: Client, project: Project, researcher: User, celery_worker: object
) -> None:
    client.force_login(researcher)
    upload = SimpleUploadedFile("gsm8k.json", PROCESSBENCH.read_bytes())
    response = client.post(
        f"/p/{project.slug}/imports/new/", {"source_format": "processbench", "file": upload}
    )
    assert response.status_code == 302
    batch_id = int(response["Location"].rstrip("/").split("/")[-1])

    batch = import_finished(batch_id)
    assert batch.status == ImportBatch.Status.DONE
    assert (batch.created_count, batch.step_count) == (400, 2082)
    assert batch.processed_count == 400
    assert Trajectory.objects.filter(project=project).count() == 400
    # The stored upload is removed once imported: after the commit (and the tables'
    # analyse that follows it), so a moment after the batch reads done.
    stored = Path(batch.stored_path)
    assert wait_until(lambda: not stored.exists(), timeout=30)

    page = client.get(f"/imports/{batch_id}/")
    assert b"400" in page.content and b"every 1s" not in page.content


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_bad_upload_lists_errors_and_imports_nothing(
    client: Client, project: Project, researcher: User, celery_worker: object
) -> None:
    records = json.loads(PROCESSBENCH.read_text())[:3]
    records[1]["steps"] = 7
    client.force_login(researcher)
    upload = SimpleUploadedFile("bad.json", json.dumps(records).encode())
    response = client.post(
        f"/p/{project.slug}/imports/new/", {"source_format": "processbench", "file": upload}
    )
    batch = import_finished(int(response["Location"].rstrip("/").split("/")[-1]))
    assert batch.status == ImportBatch.Status.FAILED
    assert not Trajectory.objects.exists()
    page = client.get(f"/imports/{batch.pk}/").content.decode()
    assert "record 1" in page and "steps" in page and "nothing from this file" in page


@pytest.mark.django_db
def test_annotators_cannot_import_and_outsiders_get_404(
    client: Client, project: Project, annotator: User, outsider: User
) -> None:
    client.force_login(annotator)
    assert client.get(f"/p/{project.slug}/imports/new/").status_code == 403
    batch = ImportBatch.objects.create(project=project, file_name="x", source_format="stepscope")
    assert client.get(f"/imports/{batch.pk}/").status_code == 200
    client.force_login(outsider)
    assert client.get(f"/p/{project.slug}/imports/new/").status_code == 404
    assert client.get(f"/imports/{batch.pk}/").status_code == 404


@pytest.mark.django_db
def test_upload_post_without_csrf_is_refused(project: Project, researcher: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    upload = SimpleUploadedFile("gsm8k.json", b"[]")
    response = client.post(
        f"/p/{project.slug}/imports/new/", {"source_format": "processbench", "file": upload}
    )
    assert response.status_code == 403
    assert not ImportBatch.objects.exists()


def record(n: int) -> dict[str, object]:
    return {
        "id": f"push-{n}",
        "task": "2 + 2?",
        "outcome": {"reward": 1.0, "success": True},
        "steps": [{"content": "2 + 2 = 4", "labels": [{"annotator": "trainer", "value": 1}]}],
    }


@pytest.mark.django_db
def test_api_push_of_a_few_trajectories_is_immediate_and_idempotent(
    project: Project, researcher: User
) -> None:
    api = api_for(researcher)
    body = {"project": project.slug, "trajectories": [record(1), record(2)]}
    first = api.post("/api/v1/imports/", body, format="json")
    assert first.status_code == 201, first.content
    assert first.json()["created_count"] == 2
    again = api.post("/api/v1/imports/", body, format="json")
    assert again.json()["created_count"] == 0 and again.json()["unchanged_count"] == 2
    assert Trajectory.objects.filter(project=project).count() == 2
    status = api.get(f"/api/v1/imports/{first.json()['id']}/")
    assert status.json()["status"] == "done"
    # Labels pushed under any name belong to a non-login import annotator.
    assert User.objects.get(username="import:trainer").is_active is False


@pytest.mark.django_db
def test_api_push_with_a_bad_record_writes_nothing(project: Project, researcher: User) -> None:
    bad = record(2)
    bad["steps"] = [{"role": "assistant"}]
    response = api_for(researcher).post(
        "/api/v1/imports/",
        {"project": project.slug, "trajectories": [record(1), bad]},
        format="json",
    )
    assert response.status_code == 400
    # A record is named by its index in the pushed list.
    assert response.json()["errors"][0]["location"] == "record 1"
    assert response.json()["errors"][0]["field"] == "steps.0.content"
    assert not Trajectory.objects.exists()


@pytest.mark.django_db
def test_api_push_names_every_bad_record_and_writes_none(
    project: Project, researcher: User
) -> None:
    bad_kind = record(3)
    bad_kind["steps"] = [{"content": "x", "kind": "thinking"}]
    records = [record(0), 7, record(2), bad_kind, {**record(4), "lables": []}]
    response = api_for(researcher).post(
        "/api/v1/imports/", {"project": project.slug, "trajectories": records}, format="json"
    )
    assert response.status_code == 400
    errors = [(e["location"], e["field"]) for e in response.json()["errors"]]
    assert errors == [("record 1", ""), ("record 3", "steps.0.kind"), ("record 4", "lables")]
    assert response.json()["rejected_count"] == 3
    assert not Trajectory.objects.exists()


@pytest.mark.django_db
def test_api_push_of_malformed_json_is_a_400(project: Project, researcher: User) -> None:
    api = api_for(researcher)
    for body in (b'{"project": "x", "trajectories": [', b'{"trajectories": [NaN]}'):
        response = api.post("/api/v1/imports/", body, content_type="application/json")
        assert response.status_code == 400
        assert "JSON parse error" in response.json()["detail"]
    too_many = {"project": project.slug, "trajectories": [record(1)] * 10_001}
    response = api.post("/api/v1/imports/", too_many, format="json")
    assert response.status_code == 400 and "trajectories" in response.json()
    assert not Trajectory.objects.exists()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_api_file_upload_is_queued(
    project: Project, researcher: User, celery_worker: object
) -> None:
    upload = SimpleUploadedFile("gsm8k.json", PROCESSBENCH.read_bytes())
    response = api_for(researcher).post(
        "/api/v1/imports/",
        {"project": project.slug, "format": "processbench", "file": upload},
        format="multipart",
    )
    assert response.status_code == 202, response.content
    batch = import_finished(response.json()["id"])
    assert batch.created_count == 400


@pytest.mark.django_db
def test_api_outsider_and_annotator(project: Project, annotator: User, outsider: User) -> None:
    batch = ImportBatch.objects.create(project=project, file_name="x", source_format="stepscope")
    body = {"project": project.slug, "trajectories": [record(1)]}
    assert api_for(annotator).post("/api/v1/imports/", body, format="json").status_code == 403
    assert api_for(outsider).post("/api/v1/imports/", body, format="json").status_code == 404
    assert api_for(outsider).get(f"/api/v1/imports/{batch.pk}/").status_code == 404
    assert not Trajectory.objects.exists()
