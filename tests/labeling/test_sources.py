"""Label sources resolve to the right (step, value) pairs."""

from __future__ import annotations

import pytest
from django.db import connection

from labeling.models import FinalLabel, LabelSchema, StepLabel
from labeling.sources import LabelSource, label_source_parse, label_source_sql
from tests.factories import UserFactory, trajectory_with_steps
from trajectories.models import Project, Step
from trajectories.services import imported_annotator

pytestmark = pytest.mark.django_db


def resolve(project: Project, text: str) -> dict[int, int]:
    sql, params = label_source_sql(project, label_source_parse(text))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def label(step: Step, username: str, value: int, status: str = "submitted") -> None:
    user = UserFactory.create(username=username)
    schema = LabelSchema.objects.get(project=step.trajectory.project)
    StepLabel.objects.create(step=step, annotator=user, schema=schema, value=value, status=status)


def test_parse_accepts_the_documented_sources_and_names_bad_ones() -> None:
    assert label_source_parse("human:ann") == LabelSource("human", "ann")
    assert label_source_parse("import:processbench").name == "processbench"
    assert label_source_parse("model:prm", threshold=0.3).threshold == 0.3
    with pytest.raises(ValueError, match="unknown label source"):
        label_source_parse("humans")
    with pytest.raises(ValueError, match="consensus needs a scorer"):
        label_source_parse("consensus")


def test_one_annotator_submitted_labels_only(project: Project) -> None:
    a, b = trajectory_with_steps(project, ["a", "b"]).steps.order_by("index")
    label(a, "ann", 1)
    label(b, "ann", -1, status="draft")
    assert resolve(project, "human:ann") == {a.pk: 1}


def test_an_annotator_who_does_not_exist_is_named_and_one_who_labelled_nothing_is_empty(
    project: Project,
) -> None:
    trajectory_with_steps(project, ["a"])
    with pytest.raises(ValueError, match=r"no user named 'anm' \(label source human:anm\)"):
        resolve(project, "human:anm")
    UserFactory.create(username="idle")
    assert resolve(project, "human:idle") == {}
    # An import source may be named before its labels come (a job waits for them).
    assert resolve(project, "import:later") == {}


def test_majority_needs_a_strict_plurality_and_ignores_imports(project: Project) -> None:
    a, b, c = trajectory_with_steps(project, ["a", "b", "c"]).steps.order_by("index")
    for name, values in {"x": (1, 1, 0), "y": (1, -1, 0), "z": (-1, 1, 1)}.items():
        for step, value in zip((a, b, c), values, strict=True):
            label(step, name, value)
    # An imported label never votes.
    schema = LabelSchema.objects.get(project=project)
    StepLabel.objects.create(step=c, annotator=imported_annotator("src"), schema=schema, value=1)
    assert resolve(project, "human:majority") == {a.pk: 1, b.pk: 1, c.pk: 0}
    assert resolve(project, "import:src") == {c.pk: 1}


def test_majority_tie_gives_no_label(project: Project) -> None:
    (a,) = trajectory_with_steps(project, ["a"]).steps.all()
    label(a, "x", 1)
    label(a, "y", -1)
    assert resolve(project, "human:majority") == {}


def test_adjudicated_and_other_projects(project: Project) -> None:
    (a,) = trajectory_with_steps(project, ["a"]).steps.all()
    other = Project.objects.create(slug="other", name="other")
    LabelSchema.objects.create(project=other)
    (b,) = trajectory_with_steps(other, ["b"]).steps.all()
    reviewer = UserFactory.create(username="rev")
    for step in (a, b):
        FinalLabel.objects.create(
            step=step,
            schema=LabelSchema.objects.get(project=step.trajectory.project),
            value=-1,
            adjudicator=reviewer,
        )
    assert resolve(project, "human:adjudicated") == {a.pk: -1}
