"""A Stepscope JSONL import with decisive failures (issue 22): a good one lands on the
import annotator's verdict; a bad one rejects the file with its line and field, and
nothing of the file is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from labeling.models import TrajectoryLabel
from trajectories.models import ImportBatch, Project, Trajectory
from trajectories.services import trajectory_import
from trajectories.services.imports import ImportRejected

pytestmark = pytest.mark.django_db


def chat(external_id: str, decisive: Any) -> dict[str, Any]:
    return {
        "id": external_id,
        "task": "Plan a trip.",
        "steps": [
            {"role": "user", "content": "Plan a trip."},
            {"agent": "Planner", "content": "Fly on Monday."},
            {"agent": "Booker", "content": "Booked Tuesday."},
        ],
        "decisive": decisive,
    }


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_decisive_failure_lands_on_the_import_verdict(project: Project, tmp_path: Path) -> None:
    path = write(
        tmp_path / "ok.jsonl",
        [chat("a", {"agent": "Booker", "step": 2, "reason": "wrong day"}), chat("b", None)],
    )
    trajectory_import(project=project, source_format="stepscope", path=path)
    [label] = TrajectoryLabel.objects.filter(annotator__username="import:stepscope")
    assert label.trajectory.external_id == "a"
    assert (label.decisive_agent, label.decisive_step, label.decisive_reason) == (
        "Booker",
        2,
        "wrong day",
    )
    assert label.status == TrajectoryLabel.Status.SUBMITTED


@pytest.mark.parametrize(
    ("decisive", "field", "message"),
    [
        (
            {"agent": "Nobody", "step": 1},
            "decisive.agent",
            "not one of the trajectory's agents (Planner, Booker)",
        ),
        (
            {"agent": "Booker", "step": 3},
            "decisive.step",
            "is 3; expected a step index from 0 to 2",
        ),
        ({"reason": "no one"}, "decisive", "names neither an agent nor a step"),
    ],
)
def test_a_bad_decisive_failure_rejects_the_file_naming_line_and_field(
    project: Project, tmp_path: Path, decisive: dict[str, Any], field: str, message: str
) -> None:
    path = write(tmp_path / "bad.jsonl", [chat("a", None), chat("b", decisive)])
    with pytest.raises(ImportRejected):
        trajectory_import(project=project, source_format="stepscope", path=path)
    [error] = ImportBatch.objects.get(file_name="bad.jsonl").errors
    assert (error["location"], error["field"]) == ("line 2", field)
    assert message in error["message"]
    assert not Trajectory.objects.filter(project=project).exists()
    assert not TrajectoryLabel.objects.exists()
