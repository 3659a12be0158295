"""Migration 0008 keys the kept majority by step and schema name. A project that labelled
under one schema before it reads the same majority after, under that schema's name,
through the same label source text, and exports the same labels."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from labeling.models import StepLabel, StepMajority
from labeling.sources import label_source_parse, label_source_sql
from tests.factories import UserFactory, trajectory_with_steps
from tests.migrating import migrate_back, migrate_to_latest
from trajectories.models import Project
from trajectories.services import imported_annotator

BEFORE = ("labeling", "0007_steplabel_annotator_schema_index")


def majority(project: Project) -> dict[int, int]:
    sql, params = label_source_sql(project, label_source_parse("human:majority"))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


@pytest.mark.django_db(transaction=True)
def test_a_single_schema_projects_majority_and_export_are_unchanged(
    tmp_path: Path, project: Project
) -> None:
    trajectory = trajectory_with_steps(project, ["a", "b", "c", "d"])
    steps = list(trajectory.steps.order_by("index"))
    schema = project.label_schemas.get(is_active=True)
    x, y, z = (UserFactory.create(username=name) for name in "xyz")
    imported = imported_annotator("processbench")
    votes = {
        0: {x: 1, y: 1, z: -1},  # 1
        1: {x: 1, y: -1},  # a tie
        2: {x: -1, imported: 1},  # the import does not vote: -1
        3: {imported: 1},  # no human vote, no row
    }
    migrate_back(connection, BEFORE)
    try:
        for index, by in votes.items():
            for user, value in by.items():
                StepLabel.objects.create(
                    step=steps[index], annotator=user, schema=schema, value=value
                )
        with connection.cursor() as cursor:
            cursor.execute("SELECT step_id, value FROM labeling_stepmajority ORDER BY step_id")
            before = cursor.fetchall()
    finally:
        migrate_to_latest(connection)
    assert before == [(steps[0].pk, 1), (steps[1].pk, None), (steps[2].pk, -1)]
    after = StepMajority.objects.order_by("step_id").values_list("step_id", "schema_name", "value")
    assert list(after) == [(step, "step quality", value) for step, value in before]
    assert majority(project) == {steps[0].pk: 1, steps[2].pk: -1}

    # The export reads the same labels through the same source text.
    out = StringIO()
    call_command(
        "export",
        *("--project", project.slug, "--format", "trl-stepwise", "--labels", "human:majority"),
        *("--neutral", "drop", "--out", str(tmp_path)),
        stdout=out,
    )
    (line,) = (tmp_path / "trl-stepwise.jsonl").read_text().splitlines()
    assert json.loads(line)["labels"] == [True]  # step 1 has no label; the record stops
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["label_source"] == "human:majority"
    assert manifest["revisions"]["label_schema"]["name"] == "step quality"

    # The new triggers keep the majority from here on.
    StepLabel.objects.create(step=steps[1], annotator=z, schema=schema, value=-1)
    assert majority(project) == {steps[0].pk: 1, steps[1].pk: -1, steps[2].pk: -1}
