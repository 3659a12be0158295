"""Hostile uploads, through the import page and the API to a real Celery worker: JSON
nested 100,000 deep inside a step, an Inspect ``.eval`` archive whose member names climb
out of any folder, a zip bomb, and a file named ``../../etc/passwd.jsonl``. Each is
refused or made harmless with a message that names the record, nothing is written
outside the media folder, and nothing crashes. (Oversized uploads:
tests/deployment/test_hardening.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.authtoken.models import Token

from tests.factories import MembershipFactory, UserFactory
from tests.trajectories.test_formats_inspect_ai import eval_members, sample, write_eval
from tests.waiting import import_finished
from trajectories.models import ImportBatch, Membership, Project, Trajectory
from trajectories.services import project_create

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

DEPTH = 100_000
DEEP = "[" * DEPTH + "]" * DEPTH


@pytest.fixture
def media(settings: Any, tmp_path: Path) -> Path:
    # The worker is a separate process with its own settings: it reads the stored path
    # from the batch, so only where the web side stores uploads matters here.
    root = tmp_path / "sandbox" / "inner" / "media"
    settings.MEDIA_ROOT = root
    return root


@pytest.fixture
def researcher(db: None) -> tuple[Project, User]:
    project = project_create(slug="uploads", name="Uploads")
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return project, user


def upload(client: Client, project: Project, name: str, data: bytes, **form: Any) -> ImportBatch:
    response = client.post(
        f"/p/{project.slug}/imports/new/",
        {"source_format": "stepscope", "file": SimpleUploadedFile(name, data), **form},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    return import_finished(int(response["Location"].rstrip("/").split("/")[-1]))


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


def record(external_id: str, **step: Any) -> str:
    return json.dumps({"id": external_id, "task": "2 + 2?", "steps": [{"content": "4", **step}]})


def nested_record(external_id: str, depth: int) -> str:
    """A trajectory line whose step's tool arguments are ``depth`` nested arrays."""
    nested = "[" * depth + "]" * depth
    return record(external_id).replace('"content": "4"', f'"content": "4", "tool_args": {nested}')


def test_deeply_nested_json_in_a_step_is_a_record_error(
    client: Client,
    researcher: tuple[Project, User],
    media: Path,
    celery_worker: object,
) -> None:
    project, user = researcher
    client.force_login(user)
    deep_line = nested_record("deep", DEPTH)
    data = "\n".join([record("fine"), deep_line, record("also-fine")]).encode()

    batch = upload(client, project, "deep.jsonl", data, skip_invalid="on")

    assert batch.status == ImportBatch.Status.DONE
    assert batch.created_count == 2
    assert batch.errors == [
        {"location": "line 2", "field": "", "message": "not valid JSON: nested too deeply"}
    ]
    page = client.get(f"/imports/{batch.pk}/").content.decode()
    assert "line 2" in page and "nested too deeply" in page
    assert set(Trajectory.objects.values_list("external_id", flat=True)) == {"fine", "also-fine"}


def test_json_nested_as_deep_as_the_parser_goes_imports_and_renders(
    client: Client,
    researcher: tuple[Project, User],
    media: Path,
    celery_worker: object,
) -> None:
    """600 levels parse; the step is stored, and every page and API call that shows its
    tool arguments answers (none recurses its way into a 500)."""
    project, user = researcher
    client.force_login(user)
    client.raise_request_exception = False
    batch = upload(client, project, "deep.jsonl", nested_record("deep", 600).encode())
    assert batch.status == ImportBatch.Status.DONE and batch.created_count == 1
    trajectory = Trajectory.objects.get()
    step = trajectory.steps.get()
    token = Token.objects.create(user=user).key
    for path in (
        f"/t/{trajectory.pk}/",
        f"/t/{trajectory.pk}/compare/",
        f"/steps/{step.pk}/content/",
        f"/steps/{step.pk}/label/",
        f"/t/{trajectory.pk}/evidence/",
        f"/api/v1/steps/{step.pk}/",
        f"/api/v1/steps/?trajectory={trajectory.pk}",
    ):
        response = client.get(path, HTTP_AUTHORIZATION=f"Token {token}")
        assert response.status_code == 200, path


def test_deeply_nested_json_posted_to_the_api_is_a_400(
    researcher: tuple[Project, User], media: Path
) -> None:
    project, user = researcher
    token = Token.objects.create(user=user).key
    trajectory = '{"id": "d", "task": "t", "steps": ' + DEEP + "}"
    body = f'{{"project": "{project.slug}", "trajectories": [{trajectory}]}}'
    response = Client(raise_request_exception=False).post(
        "/api/v1/imports/",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token}",
    )
    assert response.status_code == 400, response.content[:500]
    assert "nested too deeply" in response.json()["detail"]
    assert not Trajectory.objects.exists()


def test_archive_member_names_with_path_tricks_write_nothing_outside(
    client: Client,
    researcher: tuple[Project, User],
    media: Path,
    tmp_path: Path,
    celery_worker: object,
) -> None:
    project, user = researcher
    client.force_login(user)
    tricks = {
        "../../evil.json": sample(9),
        "/tmp/evil-absolute.json": sample(10),
        "samples/../../../evil_epoch_1.json": sample(11),
        "samples/../../escape/../samples/2_epoch_1.json": sample(12),
    }
    archive = write_eval(
        tmp_path / "tricks.eval", eval_members({"samples/1_epoch_1.json": sample(1), **tricks})
    )
    before = files_under(tmp_path)

    response = client.post(
        f"/p/{project.slug}/imports/new/",
        {
            "source_format": "inspect",
            "file": SimpleUploadedFile("tricks.eval", archive.read_bytes()),
        },
    )
    batch = import_finished(int(response["Location"].rstrip("/").split("/")[-1]))

    # Members are read from the archive in memory, never extracted: whatever their names,
    # nothing appears anywhere but the stored upload (and that is gone once imported).
    assert files_under(tmp_path) - before <= files_under(media)
    assert not Path("/tmp/evil-absolute.json").exists()
    assert not (tmp_path / "evil.json").exists() and not (tmp_path.parent / "evil.json").exists()
    assert batch.status == ImportBatch.Status.DONE, batch.errors
    # The names only label where a sample came from; every sample member is imported
    # under its own name, the others are not samples and are left alone.
    sources = set(Trajectory.objects.values_list("source__location", flat=True))
    assert "samples/1_epoch_1.json" in sources
    assert not any(name.startswith("/") for name in sources)


def test_zip_bomb_upload_is_refused_naming_the_member(
    client: Client,
    researcher: tuple[Project, User],
    media: Path,
    tmp_path: Path,
    celery_worker: object,
) -> None:
    project, user = researcher
    client.force_login(user)
    # 8 MiB of one byte deflates to about 8 KiB: a ratio near 1000:1.
    bomb = write_eval(
        tmp_path / "bomb.eval", eval_members({"samples/1_epoch_1.json": b" " * (8 * 1024 * 1024)})
    )

    response = client.post(
        f"/p/{project.slug}/imports/new/",
        {"source_format": "inspect", "file": SimpleUploadedFile("bomb.eval", bomb.read_bytes())},
    )
    batch = import_finished(int(response["Location"].rstrip("/").split("/")[-1]))

    assert batch.status == ImportBatch.Status.FAILED
    assert not Trajectory.objects.exists()
    [error] = batch.errors
    assert "samples/1_epoch_1.json would expand to 8388608" in error["message"]
    assert "possible zip bomb" in error["message"]
    page = client.get(f"/imports/{batch.pk}/").content.decode()
    assert "possible zip bomb" in page


def test_upload_named_with_a_path_is_stored_under_its_base_name(
    client: Client,
    researcher: tuple[Project, User],
    media: Path,
    tmp_path: Path,
    celery_worker: object,
) -> None:
    project, user = researcher
    client.force_login(user)
    before = files_under(tmp_path)

    batch = upload(client, project, "../../etc/passwd.jsonl", record("one").encode())

    assert batch.status == ImportBatch.Status.DONE and batch.created_count == 1
    assert batch.file_name == "passwd.jsonl"
    assert Path(batch.stored_path).resolve().is_relative_to(media.resolve())
    assert files_under(tmp_path) - before <= files_under(media)
    assert not (media.parent.parent / "etc" / "passwd.jsonl").exists()

    # The same name through the API's multipart upload.
    token = Token.objects.create(user=user).key
    response = Client().post(
        "/api/v1/imports/",
        {
            "project": project.slug,
            "format": "stepscope",
            "file": SimpleUploadedFile("../../etc/passwd.jsonl", record("two").encode()),
        },
        HTTP_AUTHORIZATION=f"Token {token}",
    )
    assert response.status_code == 202, response.content
    batch = import_finished(response.json()["id"])
    assert batch.file_name == "passwd.jsonl"
    assert Path(batch.stored_path).resolve().is_relative_to(media.resolve())
    assert files_under(tmp_path) - before <= files_under(media)
