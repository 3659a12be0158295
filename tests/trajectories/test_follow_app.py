"""A followed folder configured in the app: a project admin adds it on the followed
folders page, the worker (Celery beat's ``follow_sweep``) imports each new file and each
appended line once, and nothing outside ``STEPSCOPE_FOLLOW_ROOTS`` can be followed."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from rest_framework.test import APIClient

from tests.trajectories.test_follow import line
from trajectories.models import FollowSource, Project, Trajectory
from trajectories.services.follow import (
    FollowRefused,
    follow_pass_run,
    follow_source_add,
    follow_source_set,
    follow_sweep,
)
from trajectories.tasks import follow_sweep_task


@pytest.fixture
def root(tmp_path: Path, settings: Any) -> Path:
    folder = tmp_path / "follow-root"
    folder.mkdir()
    settings.STEPSCOPE_FOLLOW_ROOTS = [folder.resolve()]
    return folder


@pytest.mark.django_db
def test_only_folders_inside_the_roots_may_be_followed(
    project: Project, root: Path, tmp_path: Path
) -> None:
    (root / "run").mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "file.jsonl").write_text("")
    refused = {
        "run": ("path", "is not an absolute path"),
        str(outside): ("path", "is not inside a folder the server lets projects follow"),
        str(root / "escape"): ("path", "is not inside a folder the server lets projects follow"),
        str(root / "file.jsonl"): ("path", "is not a folder"),
        "/etc": ("path", "STEPSCOPE_FOLLOW_ROOTS"),
    }
    for path, (field_name, words) in refused.items():
        with pytest.raises(FollowRefused) as error:
            follow_source_add(project=project, path=path, source_format="verl")
        assert (error.value.field, words in error.value.message) == (field_name, True), path
    with pytest.raises(FollowRefused) as error:
        follow_source_add(project=project, path=str(root / "run"), source_format="nope")
    assert error.value.field == "source_format"
    source = follow_source_add(project=project, path=str(root / "run"), source_format="verl")
    assert source.by_worker
    with pytest.raises(FollowRefused, match="followed already"):
        follow_source_add(project=project, path=str(root / "run"), source_format="verl")
    assert not FollowSource.objects.exclude(pk=source.pk).exists()


@pytest.mark.django_db
def test_the_sweep_takes_over_a_command_s_folder_and_skips_one_outside_the_roots(
    project: Project, root: Path, settings: Any
) -> None:
    """A folder `import_trajectories --follow` followed keeps what it imported when the
    worker takes it over; a folder whose root was removed from the setting is not read."""
    folder = root / "run"
    folder.mkdir()
    (folder / "step-1.jsonl").write_text(line(1, 0) + line(1, 1))
    by_command = follow_source_set(project=project, path=folder, source_format="verl")
    assert follow_sweep() == []  # not the worker's yet: the sweep leaves it alone
    assert Trajectory.objects.filter(project=project).count() == 0
    follow_pass_run(source=by_command)
    assert Trajectory.objects.filter(project=project).count() == 2
    taken = follow_source_add(project=project, path=str(folder), source_format="verl")
    assert taken.pk == by_command.pk and taken.by_worker
    (folder / "step-1.jsonl").write_text(line(1, 0) + line(1, 1) + line(1, 2))
    (passed,) = follow_sweep()
    assert passed.created == 1  # the appended line only
    settings.STEPSCOPE_FOLLOW_ROOTS = []
    (folder / "step-2.jsonl").write_text(line(2, 0))
    assert follow_sweep() == []
    taken.refresh_from_db()
    assert "STEPSCOPE_FOLLOW_ROOTS: none" in taken.last_error
    assert Trajectory.objects.filter(project=project).count() == 3


@pytest.fixture
def worker_root() -> Iterator[Path]:
    """A folder inside the roots the test worker runs with (the default, under the data
    folder: the worker's environment is this process's)."""
    folder = settings.STEPSCOPE_FOLLOW_ROOTS[0] / f"test-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.django_db(transaction=True)
def test_the_worker_follows_a_folder_added_on_the_page(
    project: Project, owner: User, worker_root: Path, celery_worker: object
) -> None:
    client = Client()
    client.force_login(owner)
    url = reverse("follow-sources", args=[project.slug])
    response = client.post(url, {"path": str(worker_root), "source_format": "verl"})
    assert response.status_code == 302, response.content.decode()[:2000]
    source = FollowSource.objects.get(project=project)
    assert source.by_worker and source.path == str(worker_root.resolve())

    (worker_root / "step-1.jsonl").write_text(line(1, 0) + line(1, 1) + '{"input": "half')
    assert follow_sweep_task.delay().get(timeout=120) == 1
    assert Trajectory.objects.filter(project=project).count() == 2
    # The line being written is finished, and a new file comes: each imported once, by
    # a worker that remembers nothing (what was imported is in the database).
    with (worker_root / "step-1.jsonl").open("a") as out:
        out.write(' prompt", "output": "x", "gts": "1", "score": 1.0, "step": 1}\n')
    (worker_root / "step-2.jsonl").write_text(line(2, 0))
    follow_sweep_task.delay().get(timeout=120)
    follow_sweep_task.delay().get(timeout=120)
    assert Trajectory.objects.filter(project=project).count() == 4
    page = client.get(url).content.decode()
    assert str(worker_root.resolve()) in page and "followed by the worker" in page

    remove = reverse("follow-source-remove", args=[project.slug, source.pk])
    assert client.post(remove).status_code == 302
    assert not FollowSource.objects.filter(project=project).exists()
    assert Trajectory.objects.filter(project=project).count() == 4  # imports stay


@pytest.mark.django_db
def test_a_refused_folder_is_named_on_the_page(project: Project, owner: User, root: Path) -> None:
    client = Client()
    client.force_login(owner)
    url = reverse("follow-sources", args=[project.slug])
    response = client.post(url, {"path": "/etc", "source_format": "verl"})
    assert response.status_code == 400
    assert "is not inside a folder the server lets projects follow" in response.content.decode()
    (root / "run").mkdir()
    response = client.post(url, {"path": str(root / "run"), "source_format": "verl", "every": "1"})
    assert response.status_code == 400
    assert "unknown field: every" in response.content.decode()
    assert not FollowSource.objects.exists()


@pytest.mark.django_db
def test_the_api_adds_shows_and_removes_a_followed_folder(
    project: Project, owner: User, annotator: User, root: Path
) -> None:
    """The page's rules through the API: a refused folder is a 400 naming the field, an
    unknown field is refused, the source shows how far each file got, and an annotator
    is refused (403) like on the page."""
    api = APIClient()
    api.force_authenticate(owner)
    url = reverse("api-follow-source-list", args=[project.slug])
    folder = root / "run"
    folder.mkdir()
    refused = api.post(url, {"path": "/etc", "source_format": "verl"}, format="json")
    assert refused.status_code == 400
    assert "STEPSCOPE_FOLLOW_ROOTS" in refused.json()["path"][0]
    unknown = api.post(
        url, {"path": str(folder), "source_format": "verl", "every": 5}, format="json"
    )
    assert (unknown.status_code, list(unknown.json())) == (400, ["every"])
    made = api.post(url, {"path": str(folder), "source_format": "verl"}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["by_worker"] and made.json()["files"] == []

    (folder / "step-1.jsonl").write_text(line(1, 0) + line(1, 1))
    follow_sweep()
    detail = api.get(reverse("api-follow-source-detail", args=[project.slug, made.json()["id"]]))
    (followed,) = detail.json()["files"]
    assert (followed["path"], followed["trajectories"], followed["imported_lines"]) == (
        "step-1.jsonl",
        2,
        2,
    )
    with CaptureQueriesContext(connection) as one:
        assert [source["id"] for source in api.get(url).json()] == [made.json()["id"]]
    (root / "run-2").mkdir()
    (root / "run-2" / "step-1.jsonl").write_text(line(2, 0))
    api.post(url, {"path": str(root / "run-2"), "source_format": "verl"}, format="json")
    follow_sweep()
    with CaptureQueriesContext(connection) as two:
        assert len(api.get(url).json()) == 2
    assert len(two.captured_queries) == len(one.captured_queries)  # files in one query

    api.force_authenticate(annotator)
    assert api.get(url).status_code == 403
    api.force_authenticate(owner)
    remove = reverse("api-follow-source-remove", args=[project.slug, made.json()["id"]])
    assert api.post(remove).status_code == 204
    assert [s.path for s in FollowSource.objects.filter(project=project)] == [
        str((root / "run-2").resolve())
    ]
    assert Trajectory.objects.filter(project=project).count() == 3
