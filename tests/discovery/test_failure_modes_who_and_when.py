"""Failure modes on the real Who&When files: their human-labelled first errors (imported
with the mapped importer, label source ``import:mapped``) clustered, and the clusters'
purity against the hand-grouping of their ``mistake_reason`` texts that
tests/discovery/README.md wrote down before any clustering was run."""

from __future__ import annotations

import json

import pytest

from discovery.mode_services import failure_mode_run_start, failure_modes_execute
from discovery.modes import purity
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_DIR, WHO_AND_WHEN_LABELABLE
from trajectories.models import Project, Trajectory
from trajectories.services import trajectory_import

pytestmark = pytest.mark.django_db

# The files' outcome (false in each: every log is a failure) is ``is_correct`` in the
# Algorithm-Generated half and ``is_corrected`` in the Hand-Crafted one.
OUTCOME = {"Algorithm-Generated": "is_correct", "Hand-Crafted": "is_corrected"}
# tests/discovery/README.md, "the hand-grouping" (written before clustering).
HAND_GROUPS = {
    "Algorithm-Generated/1.json": "procedure",
    "Algorithm-Generated/47.json": "procedure",
    "Hand-Crafted/24.json": "procedure",
    "Algorithm-Generated/21.json": "fact",
    "Hand-Crafted/1.json": "navigation",
}
# Measured (README, "Measured"): 0.80 with the shipped encoder; chance is 0.60.
PURITY_FLOOR = 0.8


def test_the_modes_of_the_who_and_when_files_follow_the_hand_grouping(project: Project) -> None:
    truth: dict[int, str] = {}
    for name, group in HAND_GROUPS.items():
        path = WHO_AND_WHEN_DIR / name
        mapping = {**WHO_AND_WHEN_LABELABLE, "outcome": OUTCOME[name.split("/")[0]]}
        trajectory_import(project=project, source_format="mapped", path=path, mapping=mapping)
        external_id = json.loads(path.read_text(encoding="utf-8"))["question_ID"]
        truth[Trajectory.objects.get(project=project, external_id=external_id).pk] = group
    run = failure_mode_run_start(project=project, user=None, labels="import:mapped")
    run = failure_modes_execute(run_id=run.pk)
    assert run.status == "done", run.error
    assert run.total == 5  # every file's first error, each a failure
    clusters = [
        list(mode.members.values_list("trajectory_id", flat=True)) for mode in run.modes.all()
    ]
    found = purity(clusters, truth)
    print(
        f"Who&When purity {found:.2f}, k={run.k}, silhouette={run.silhouette:.3f}, modes:",
        [
            (m.name, sorted(truth[t] for t in c))
            for m, c in zip(run.modes.all(), clusters, strict=True)
        ],
    )
    assert found >= PURITY_FLOOR
