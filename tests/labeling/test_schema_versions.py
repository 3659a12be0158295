"""An annotator who labels a step again under a newer version of the schema has one
label on it that counts, the newest submitted one: the older is ``superseded`` (kept,
with its history) in the majority, label sources, agreement and exports alike, and
counts again when the newer label is taken back."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection

from labeling.models import FinalLabel, LabelSchema, StepLabel, StepLabelEvent
from labeling.services import (
    final_label_set,
    label_schema_save,
    step_label_set,
    step_label_undo,
    trajectory_submit,
)
from labeling.sources import label_source_parse, label_source_sql
from tests.factories import trajectory_with_steps
from tests.labeling.conftest import state, step_at
from tests.migrating import migrate_back, migrate_to_latest
from trajectories.models import Project, Trajectory

BINARY = [
    {"value": -1, "name": "wrong", "key": "1", "color": "#ff0000"},
    {"value": 1, "name": "right", "key": "2", "color": "#00ff00"},
]


def new_version(schema: LabelSchema) -> LabelSchema:
    saved = label_schema_save(
        schema=schema,
        kind=LabelSchema.Kind.BINARY,
        values=BINARY,
        error_tags=[],
        ask_rationale=False,
        first_error_mode=False,
    )
    assert saved.version == schema.version + 1
    return saved


def source_rows(project: Project, source: str) -> list[tuple[int, int]]:
    sql, params = label_source_sql(project, label_source_parse(source))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return sorted(cursor.fetchall())


def statuses(user: User) -> dict[tuple[int, int], str]:
    return {
        (index, version): status
        for index, version, status in StepLabel.objects.filter(annotator=user).values_list(
            "step__index", "schema__version", "status"
        )
    }


def label_all(user: User, trajectory: Trajectory, value: int) -> None:
    for index in range(5):
        step_label_set(state=state(user, trajectory), step=step_at(trajectory, index), value=value)
    trajectory_submit(state=state(user, trajectory))


def test_a_label_under_the_new_version_supersedes_the_old_one_until_taken_back(
    owner: User, researcher: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    first = step_at(trajectory, 0)
    label_all(owner, trajectory, -1)
    step_label_set(state=state(researcher, trajectory), step=first, value=1)
    trajectory_submit(state=state(researcher, trajectory), flagged=True)
    step_label_set(state=state(owner, trajectory), step=first, value=-1)
    assert first.pk not in dict(source_rows(project, "human:majority"))  # -1 against 1
    new_version(schema)

    # Owner changes their mind under version 2: one vote each now, a tie.
    step_label_set(state=state(owner, trajectory), step=first, value=1)
    assert statuses(owner)[(0, 1)] == "superseded"
    assert statuses(owner)[(0, 2)] == "submitted"
    assert all(statuses(owner)[(index, 1)] == "submitted" for index in range(1, 5))
    owner_rows = source_rows(project, "human:owner")
    assert len(owner_rows) == 5 and (first.pk, 1) in owner_rows
    majority = dict(source_rows(project, "human:majority"))
    assert majority[first.pk] == 1  # owner 1 (v2), researcher 1
    # The status change is in the history: nothing the annotator submitted is lost.
    assert StepLabelEvent.objects.filter(
        annotator=owner, step=first, schema=schema, status="superseded"
    ).exists()

    # Taken back, the version 1 label counts again.
    step_label_undo(state=state(owner, trajectory))
    assert statuses(owner)[(0, 1)] == "submitted"
    assert (0, 2) not in statuses(owner)
    assert (first.pk, -1) in source_rows(project, "human:owner")
    assert first.pk not in dict(source_rows(project, "human:majority"))  # -1 against 1


def test_a_draft_under_the_new_version_supersedes_nothing_until_submitted(
    owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    label_all(owner, trajectory, -1)
    new_version(schema)
    # Reopened work (a draft verdict again) writes drafts: the old labels still count.
    owner_verdict = owner.trajectory_labels.get(trajectory=trajectory)
    owner_verdict.status = "draft"
    owner_verdict.save(update_fields=["status"])
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 2), value=1)
    assert statuses(owner)[(2, 2)] == "draft"
    assert statuses(owner)[(2, 1)] == "submitted"
    assert (step_at(trajectory, 2).pk, -1) in source_rows(project, "human:owner")
    for index in (0, 1, 3, 4):
        step_label_set(state=state(owner, trajectory), step=step_at(trajectory, index), value=1)
    trajectory_submit(state=state(owner, trajectory))
    assert {status for (_, version), status in statuses(owner).items() if version == 1} == {
        "superseded"
    }
    assert source_rows(project, "human:owner") == sorted(
        (step_at(trajectory, index).pk, 1) for index in range(5)
    )


def test_an_export_of_an_annotator_who_relabelled_under_a_new_version_has_one_label_a_step(
    tmp_path: Path, owner: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    label_all(owner, trajectory, 1)
    new_version(schema)
    step_label_set(state=state(owner, trajectory), step=step_at(trajectory, 3), value=-1)
    out = StringIO()
    call_command(
        "export",
        *("--project", "demo", "--format", "trl-stepwise", "--labels", "human:owner"),
        *("--neutral", "drop"),
        *("--out", str(tmp_path)),
        stdout=out,
    )
    (line,) = (tmp_path / "trl-stepwise.jsonl").read_text().splitlines()
    # Version 2's -1 on step 3 is the first error, where the record ends.
    assert json.loads(line)["labels"] == [True, True, True, False]


def test_other_schema_names_and_other_annotators_are_left_alone(
    owner: User, researcher: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    first = step_at(trajectory, 0)
    other = LabelSchema.objects.create(
        project=project, name="helpfulness", kind="binary", values=BINARY, is_active=False
    )
    StepLabel.objects.create(step=first, annotator=owner, schema=other, value=1)
    step_label_set(state=state(researcher, trajectory), step=first, value=-1)
    trajectory_submit(state=state(researcher, trajectory), flagged=True)
    new_version(schema)
    label_all(owner, trajectory, 1)
    assert StepLabel.objects.get(schema=other).status == "submitted"
    assert StepLabel.objects.get(annotator=researcher).status == "submitted"


def test_adjudicating_under_the_new_version_replaces_the_old_final_label(
    owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    first = step_at(trajectory, 0)
    final_label_set(step=first, schema=schema, adjudicator=owner, value=-1)
    newer = new_version(schema)
    final_label_set(step=first, schema=newer, adjudicator=owner, value=1)
    assert list(FinalLabel.objects.values_list("schema_id", "value")) == [(newer.pk, 1)]
    assert source_rows(project, "human:adjudicated") == [(first.pk, 1)]
    final_label_set(step=first, schema=newer, adjudicator=owner, value=None)
    assert not FinalLabel.objects.exists()


def test_labels_copied_in_bulk_are_ranked_in_one_statement(
    owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    newer = new_version(schema)
    steps = list(trajectory.steps.order_by("index"))
    # One statement writes both versions' labels: the newer counts on every step.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO labeling_steplabel (step_id, annotator_id, schema_id, value, tags,"
            " rationale, correction, status, saw_model_scores, created_at, updated_at)"
            " SELECT s.id, %s, v.schema_id, v.value, '[]', '', '', 'submitted', false,"
            " now(), now() FROM trajectories_step s CROSS JOIN (VALUES (%s, -1), (%s, 1))"
            " AS v(schema_id, value) WHERE s.trajectory_id = %s",
            [owner.pk, schema.pk, newer.pk, trajectory.pk],
        )
    assert set(statuses(owner).values()) == {"submitted", "superseded"}
    assert source_rows(project, "human:owner") == sorted((step.pk, 1) for step in steps)
    assert dict(source_rows(project, "human:majority")) == {step.pk: 1 for step in steps}
    StepLabel.objects.filter(schema=newer).delete()
    assert source_rows(project, "human:owner") == sorted((step.pk, -1) for step in steps)


@pytest.mark.django_db(transaction=True)
def test_the_migration_ranks_the_labels_already_there(project: Project, owner: User) -> None:
    """Labels written before the rule (both versions submitted) and two adjudications of
    one step are put right when migration 0006 runs, and the majority recounted."""
    trajectory = trajectory_with_steps(project, ["a", "b"])
    first, second = trajectory.steps.order_by("index")
    schema = project.label_schemas.get(is_active=True)
    migrate_back(connection, ("labeling", "0005_decisive_failure"))
    try:
        # The schema table as it was then (no later columns): a version 2 by hand.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE labeling_labelschema SET is_active = false WHERE id = %s", [schema.pk]
            )
            cursor.execute(
                "INSERT INTO labeling_labelschema (project_id, name, kind, values, error_tags,"
                " ask_rationale, first_error_mode, version, is_active, created_at)"
                " SELECT project_id, name, 'binary', %s, '[]', false, false, 2, true, now()"
                " FROM labeling_labelschema WHERE id = %s RETURNING id",
                [json.dumps(BINARY), schema.pk],
            )
            (newer_id,) = cursor.fetchone() or (None,)
        newer = LabelSchema(pk=newer_id, project=project, name=schema.name, version=2)
        for step, old, new in ((first, -1, 1), (second, 1, 1)):
            StepLabel.objects.create(step=step, annotator=owner, schema=schema, value=old)
            StepLabel.objects.create(step=step, annotator=owner, schema=newer, value=new)
        FinalLabel.objects.create(step=first, schema=schema, adjudicator=owner, value=-1)
        FinalLabel.objects.create(step=first, schema=newer, adjudicator=owner, value=1)
        assert len(source_rows(project, "human:owner")) == 4
    finally:
        migrate_to_latest(connection)
    assert dict(StepLabel.objects.values_list("schema_id", "status").distinct()) == {
        schema.pk: "superseded",
        newer.pk: "submitted",
    }
    assert source_rows(project, "human:owner") == [(first.pk, 1), (second.pk, 1)]
    assert dict(source_rows(project, "human:majority")) == {first.pk: 1, second.pk: 1}
    assert list(FinalLabel.objects.values_list("schema_id", flat=True)) == [newer.pk]
