"""The label dimension made explicit: a label source, the majority, agreement, the list's
label filters and the label API read one label schema (by name), never mixing another's;
a project with one schema reads it without naming it, one with several must name one."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from evaluation.compare import human_agreement
from labeling.models import FinalLabel, LabelSchema, StepLabel, StepMajority
from labeling.sources import (
    LabelSource,
    label_source_annotators_sql,
    label_source_parse,
    label_source_sql,
)
from tests.factories import UserFactory, trajectory_with_steps
from trajectories.models import Project, Step, Trajectory
from trajectories.selection import SelectionError, selection_parse
from trajectories.selectors import trajectories_filtered

pytestmark = pytest.mark.django_db

SEVERITY = [
    {"value": 1, "name": "minor", "key": "7"},
    {"value": 2, "name": "major", "key": "8"},
    {"value": 3, "name": "critical", "key": "9"},
]


def rows(project: Project, text: str, schema: str | None = None) -> dict[int, int]:
    sql, params = label_source_sql(project, label_source_parse(text), schema=schema)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        found = cursor.fetchall()
    assert len(found) == len({step for step, _ in found}), "a step labelled twice"
    return dict(found)


def label(step: Step, user: User, schema: LabelSchema, value: int) -> None:
    StepLabel.objects.create(step=step, annotator=user, schema=schema, value=value)


@pytest.fixture
def correctness(project: Project) -> LabelSchema:
    return project.label_schemas.get(is_active=True)  # "step quality", ternary


@pytest.fixture
def severity(project: Project, correctness: LabelSchema) -> LabelSchema:
    return LabelSchema.objects.create(
        project=project, name="severity", kind=LabelSchema.Kind.ORDINAL, values=SEVERITY
    )


@pytest.fixture
def steps(project: Project) -> list[Step]:
    trajectory = trajectory_with_steps(project, ["a", "b", "c"])
    return list(trajectory.steps.order_by("index"))


def test_parse_reads_a_schema_after_a_slash_only_for_peoples_sources() -> None:
    assert label_source_parse("human:majority/severity") == LabelSource(
        "human", "majority", schema="severity"
    )
    assert label_source_parse("human:ann/step quality").schema == "step quality"
    assert label_source_parse("import:processbench/a/b").schema == "a/b"
    assert label_source_parse("consensus/severity", scorer="prm").schema == "severity"
    # A scorer or a policy may be named like a hub id: no schema there.
    assert label_source_parse("model:Qwen/PRM-7B") == LabelSource("model", "Qwen/PRM-7B")
    assert label_source_parse("mc:org/policy:soft").schema == ""
    assert str(label_source_parse("human:majority/severity")) == "human:majority/severity"
    assert label_source_parse("human:majority/severity").text() == "human:majority/severity"
    assert str(label_source_parse("human:majority")) == "human:majority"  # as before
    with pytest.raises(ValueError, match="names no label schema"):
        label_source_parse("human:majority/")


def test_one_schema_is_read_without_naming_it(
    project: Project, correctness: LabelSchema, steps: list[Step]
) -> None:
    ann = UserFactory.create(username="ann")
    label(steps[0], ann, correctness, 1)
    assert rows(project, "human:ann") == {steps[0].pk: 1}
    assert rows(project, "human:ann/step quality") == {steps[0].pk: 1}
    assert rows(project, "human:majority") == {steps[0].pk: 1}
    with pytest.raises(ValueError, match=r"no label schema named 'severty'.*'step quality'"):
        rows(project, "human:ann/severty")


def test_a_majority_never_mixes_two_schemas(
    project: Project, correctness: LabelSchema, severity: LabelSchema, steps: list[Step]
) -> None:
    x, y, z = (UserFactory.create(username=name) for name in "xyz")
    first, second, _ = steps
    # Correctness: 1, 1, -1 on the first step (a majority of 1). Severity: 3 by x alone.
    # Counted together, 1 would have three votes of five on the first step (and -1, 3
    # one each); the second step's correctness tie (1 against -1) would be broken by
    # severity's 1.
    label(first, x, correctness, 1)
    label(first, y, correctness, 1)
    label(first, z, correctness, -1)
    label(first, x, severity, 3)
    label(second, x, correctness, 1)
    label(second, y, correctness, -1)
    label(second, z, severity, 1)
    assert rows(project, "human:majority/step quality") == {first.pk: 1}
    assert rows(project, "human:majority/severity") == {first.pk: 3, second.pk: 1}
    assert set(StepMajority.objects.values_list("step_id", "schema_name", "value")) == {
        (first.pk, "step quality", 1),
        (second.pk, "step quality", None),  # a tie
        (first.pk, "severity", 3),
        (second.pk, "severity", 1),
    }
    # Moving a label to the other schema recounts both.
    StepLabel.objects.filter(step=second, annotator=z).update(schema=correctness, value=1)
    assert rows(project, "human:majority/step quality") == {first.pk: 1, second.pk: 1}
    assert rows(project, "human:majority/severity") == {first.pk: 3}
    assert rows(project, "human:x/severity") == {first.pk: 3}
    assert rows(project, "human:x", schema="severity") == {first.pk: 3}
    # Whose votes the severity majority stands on: x's alone.
    voters = label_source_annotators_sql(project, label_source_parse("human:majority/severity"))
    assert voters is not None
    sql, params = voters
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert cursor.fetchall() == [(first.pk, "x")]


def test_several_schemas_must_be_named(
    project: Project, correctness: LabelSchema, severity: LabelSchema, steps: list[Step]
) -> None:
    for text in ("human:majority", "human:adjudicated", "import:processbench"):
        with pytest.raises(ValueError, match=r"several schemas \('severity', 'step quality'\)"):
            rows(project, text)
    owner = UserFactory.create(username="boss")
    FinalLabel.objects.create(step=steps[0], schema=severity, adjudicator=owner, value=2)
    FinalLabel.objects.create(step=steps[0], schema=correctness, adjudicator=owner, value=-1)
    assert rows(project, "human:adjudicated/severity") == {steps[0].pk: 2}
    assert rows(project, "human:adjudicated/step quality") == {steps[0].pk: -1}
    # A schema with no active version (all edited away) still has its labels named.
    severity.is_active = False
    severity.save(update_fields=["is_active"])
    assert rows(project, "human:adjudicated") == {steps[0].pk: -1}  # one active schema
    assert rows(project, "human:adjudicated/severity") == {steps[0].pk: 2}


def test_agreement_is_per_schema(
    project: Project, correctness: LabelSchema, severity: LabelSchema, steps: list[Step]
) -> None:
    x, y = (UserFactory.create(username=name) for name in "xy")
    for step in steps:
        label(step, x, correctness, 1)
        label(step, y, correctness, 1)
        label(step, x, severity, 1)
        label(step, y, severity, 3)
    agreeing = human_agreement(project, schema="step quality")
    assert (agreeing.schema, agreeing.labels, agreeing.percent_agreement) == (
        "step quality",
        6,
        1.0,
    )
    differing = human_agreement(project, schema="severity")
    assert (differing.schema, differing.percent_agreement) == ("severity", 0.0)
    assert differing.as_json()["schema"] == "severity"
    with pytest.raises(ValueError, match="several schemas"):
        human_agreement(project)


def test_the_list_filters_read_the_schema_they_name(
    project: Project, correctness: LabelSchema, severity: LabelSchema, steps: list[Step]
) -> None:
    other = trajectory_with_steps(project, ["d"])
    x = UserFactory.create(username="x")
    label(steps[0], x, correctness, -1)  # a first error in the correctness schema only
    (d,) = other.steps.all()
    label(d, x, severity, 1)

    def chosen(**query: str) -> set[Trajectory]:
        return set(trajectories_filtered(project, selection_parse(query)))

    trajectory = steps[0].trajectory
    assert chosen(first_error="yes", label_schema="step quality") == {trajectory}
    assert chosen(first_error="yes", label_schema="severity") == set()
    assert chosen(label_status="partial", label_schema="severity") == set()
    assert chosen(label_status="complete", label_schema="severity") == {other}
    with pytest.raises(SelectionError) as refused:
        chosen(first_error="yes")
    assert "several schemas" in refused.value.errors["label_schema"]
    with pytest.raises(SelectionError) as unknown:
        chosen(label_schema="helpfulness")
    assert "no label schema named 'helpfulness'" in unknown.value.errors["label_schema"]


def test_the_label_api_names_each_labels_schema(
    client: Client,
    owner: User,
    project: Project,
    correctness: LabelSchema,
    severity: LabelSchema,
    steps: list[Step],
) -> None:
    label(steps[0], owner, correctness, 1)
    label(steps[0], owner, severity, 2)
    client.force_login(owner)
    response = client.get("/api/v1/labels/", {"project": project.slug, "schema_name": "severity"})
    assert response.status_code == 200
    (only,) = response.json()["results"]
    assert (only["schema_name"], only["schema"], only["value"]) == ("severity", severity.pk, 2)


def test_an_export_names_the_schema_it_reads(
    tmp_path: Path,
    project: Project,
    correctness: LabelSchema,
    severity: LabelSchema,
    steps: list[Step],
) -> None:
    x = UserFactory.create(username="x")
    for step in steps:
        label(step, x, correctness, 1)
        label(step, x, severity, 3)

    def export(labels: str) -> dict[str, Any]:
        call_command(
            "export",
            *("--project", project.slug, "--format", "trl-stepwise", "--labels", labels),
            *("--neutral", "drop", "--out", str(tmp_path)),
            stdout=StringIO(),
        )
        manifest: dict[str, Any] = json.loads((tmp_path / "manifest.json").read_text())
        return manifest

    with pytest.raises(CommandError, match="several schemas"):
        export("human:x")
    manifest = export("human:x/step quality")
    assert manifest["label_source"] == "human:x/step quality"
    assert manifest["revisions"]["label_schema"]["name"] == "step quality"
    (line,) = (tmp_path / "trl-stepwise.jsonl").read_text().splitlines()
    assert json.loads(line)["labels"] == [True, True, True]
