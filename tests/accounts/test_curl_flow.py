"""docs/api.md's steps, run with curl against a live server and a real worker: a token
pushes a file, the worker imports it, one bulk request labels and submits a trajectory,
and its labels count as that user's."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from accounts.services import api_token_create
from tests.labeling.test_api_workflow import source_values
from tests.waiting import import_finished
from trajectories.models import Project

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


def curl(*args: str) -> tuple[int, Any]:
    executable = shutil.which("curl")
    assert executable, "curl is needed for this test (Debian package curl)"
    done = subprocess.run(
        [executable, "-sS", "-w", "\n%{http_code}", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    body, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(body)


def test_a_token_pushes_a_file_and_labels_through_curl(
    project: Project, owner: User, live_server: Any, celery_worker: object, tmp_path: Path
) -> None:
    _, token = api_token_create(user=owner, name="training job")
    auth = f"Authorization: Token {token}"
    api = f"{live_server.url}/api/v1"
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"r{n}",
                    "task": f"{n} + 2?",
                    "steps": [{"content": "Add."}, {"content": f"{n + 2}"}],
                }
            )
            + "\n"
            for n in range(3)
        )
    )

    status, batch = curl(
        "-H",
        auth,
        "-F",
        f"project={project.slug}",
        "-F",
        "format=stepscope",
        "-F",
        f"file=@{rollouts}",
        f"{api}/imports/",
    )
    assert status == 202, batch
    assert import_finished(batch["id"]).created_count == 3

    status, found = curl("-H", auth, f"{api}/trajectories/?project={project.slug}&external_id=r1")
    assert status == 200
    trajectory = found["results"][0]["id"]
    labels = [{"trajectory": trajectory, "index": i, "value": 1} for i in range(2)]
    status, written = curl(
        "-H",
        auth,
        "-H",
        "Content-Type: application/json",
        "-d",
        json.dumps({"labels": labels, "submit": True}),
        f"{api}/labels/bulk/",
    )
    assert status == 200, written
    assert [v["status"] for v in written["submitted"]] == ["submitted"]
    assert sorted(source_values(project, "human:owner").values()) == [1, 1]

    status, refused = curl("-H", "Authorization: Token ssk_not-a-token", f"{api}/projects/")
    assert status == 401 and "revoked, has expired or was never issued" in refused["detail"]
