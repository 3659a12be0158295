"""The largest trajectory and texts the importer stores (``prepare.TRAJECTORY_MAX_STEPS``,
``prepare.TEXT_MAX_CHARS``): a record past one is refused with its line, the field and by
how much, never stored cut; the file's other records import with ``--skip-invalid``, and
nothing of the file without it. A push says the same of the record it names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from rest_framework.test import APIClient

from trajectories import prepare, synthetic
from trajectories.models import Project, Step, Trajectory
from trajectories.services import ImportRejected, trajectory_import

pytestmark = pytest.mark.django_db


def records(count: int) -> list[dict[str, Any]]:
    return list(synthetic.rollouts(tasks=count, rollouts_per_task=1, seed=3))


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_step_past_the_text_cap_is_refused_naming_it(project: Project, tmp_path: Path) -> None:
    rows = records(2)
    over = prepare.TEXT_MAX_CHARS + 7
    rows[1]["steps"][1]["content"] = "x" * over
    path = write(tmp_path / "runs.jsonl", rows)
    with pytest.raises(ImportRejected) as rejected:
        trajectory_import(project=project, source_format="stepscope", path=path)
    (error,) = rejected.value.batch.errors
    assert (error["location"], error["field"]) == ("line 2", "steps.1.content")
    assert (
        f"is {over:,} characters, 7 past the cap of {prepare.TEXT_MAX_CHARS:,}"
        in (error["message"])
    )
    assert not Trajectory.objects.filter(project=project).exists()

    batch = trajectory_import(
        project=project, source_format="stepscope", path=path, skip_invalid=True
    )
    assert (batch.created_count, batch.rejected_count) == (1, 1)
    longest = max(len(step.content) for step in Step.objects.filter(trajectory__project=project))
    assert longest < 1000  # the refused record's text stored nowhere, cut or whole


def test_a_trajectory_past_the_step_cap_is_refused(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prepare, "TRAJECTORY_MAX_STEPS", 3)
    rows = [row for row in records(6) if len(row["steps"]) > 3][:1]
    steps = len(rows[0]["steps"])
    path = write(tmp_path / "long.jsonl", rows)
    with pytest.raises(ImportRejected) as rejected:
        trajectory_import(project=project, source_format="stepscope", path=path)
    (error,) = rejected.value.batch.errors
    assert (error["location"], error["field"]) == ("line 1", "steps")
    assert error["message"] == (
        f"has {steps:,} steps, {steps - 3:,} past the cap of 3 steps a trajectory may have"
    )


def test_a_push_past_the_text_cap_names_the_record(project: Project, owner: User) -> None:
    rows = records(2)
    rows[0]["task"] = "t" * (prepare.TEXT_MAX_CHARS + 1)
    api = APIClient()
    api.force_authenticate(owner)
    response = api.post(
        reverse("import-list"), {"project": project.slug, "trajectories": rows}, format="json"
    )
    assert response.status_code == 400, response.content[:500]
    text = json.dumps(response.json())
    assert "record 0" in text and "task" in text and "1 past the cap" in text
    assert not Trajectory.objects.filter(project=project).exists()
