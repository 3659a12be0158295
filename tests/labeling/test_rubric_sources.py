"""Rubric sources: one annotator's marks (on what they submitted), the annotators'
majority per criterion (a tie gives none; evidence the steps most of its voters cite),
and an LLM judge's (registered by scoring), with the marks worked out by hand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import Rubric, RubricMark, TrajectoryLabel
from labeling.rubric_sources import (
    RubricSource,
    rubric_marks_read,
    rubric_source_choices,
    rubric_source_parse,
)
from labeling.services.rubrics import rubric_save
from scoring import prm
from scoring.models import JudgeRubricMark, Scorer
from scoring.services.rubric_marks import RubricMarkInput, judge_rubric_marks_write
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project, ProjectDeletion, Trajectory
from trajectories.services.deletion import project_deletion_run

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}

CRITERIA = [{"text": "Checks the answer", "weight": 2}, {"text": "Explains each step"}]


@dataclass
class RubricWorld:
    rubric: Rubric
    trajectories: list[Trajectory]
    judge: Scorer


def rubric_world(project: Project) -> RubricWorld:
    """Three trajectories of four steps marked by three annotators (the third never
    submitted the third trajectory) and a judge:

    criterion 0: t1 met [1,2] / met [2] / not_met; t2 met / not_met (a tie); t3 na / na
    (/ met [0], not submitted). Criterion 1: t1 not_met [3] / not_met [3] / not_met; t2
    met [0] by the first alone. The judge: t1 met [2,3], met [3]; t2 met [1], met [0];
    t3 not_met, na."""
    rubric = rubric_save(project=project, user_id=None, criteria=CRITERIA)
    trajectories = [
        trajectory_with_steps(project, [f"{n}: step {i}" for i in range(4)]) for n in range(3)
    ]
    t1, t2, t3 = trajectories
    people: list[User] = []
    for name in ("ann1", "ann2", "ann3"):
        user = UserFactory.create(username=name)
        MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
        people.append(user)
    ann1, ann2, ann3 = people
    marks = [
        (t1, ann1, 0, "met", [1, 2]),
        (t1, ann2, 0, "met", [2]),
        (t1, ann3, 0, "not_met", []),
        (t2, ann1, 0, "met", []),
        (t2, ann2, 0, "not_met", []),
        (t3, ann1, 0, "na", []),
        (t3, ann2, 0, "na", []),
        (t3, ann3, 0, "met", [0]),
        (t1, ann1, 1, "not_met", [3]),
        (t1, ann2, 1, "not_met", [3]),
        (t1, ann3, 1, "not_met", []),
        (t2, ann1, 1, "met", [0]),
    ]
    for trajectory, user, criterion, mark, evidence in marks:
        RubricMark.objects.create(
            trajectory=trajectory,
            annotator=user,
            rubric=rubric,
            criterion=criterion,
            mark=mark,
            evidence=evidence,
        )
    for trajectory in trajectories:
        for user in people:
            if (trajectory, user) != (t3, ann3):
                TrajectoryLabel.objects.create(
                    trajectory=trajectory, annotator=user, status="submitted"
                )
    judge = Scorer.objects.create(project=project, name="judge", kind=prm.EXTERNAL)
    judge_rubric_marks_write(
        scorer=judge,
        rubric=rubric,
        marks=[
            RubricMarkInput(t1.pk, 0, "met", (2, 3)),
            RubricMarkInput(t1.pk, 1, "met", (3,)),
            RubricMarkInput(t2.pk, 0, "met", (1,)),
            RubricMarkInput(t2.pk, 1, "met", (0,)),
            RubricMarkInput(t3.pk, 0, "not_met"),
            RubricMarkInput(t3.pk, 1, "na"),
        ],
    )
    return RubricWorld(rubric, trajectories, judge)


def test_sources_parse_with_or_without_the_prefix() -> None:
    assert rubric_source_parse("rubric:human:ann1") == RubricSource("human", "ann1")
    assert rubric_source_parse(" judge:j ") == RubricSource("judge", "j")
    assert str(RubricSource("human", "majority")) == "rubric:human:majority"
    for bad in ("rubric:model:x", "human:", "majority", ""):
        with pytest.raises(ValueError, match="unknown rubric source"):
            rubric_source_parse(bad)


def test_one_annotator_counts_only_what_they_submitted(project: Project) -> None:
    world = rubric_world(project)
    t1, _, t3 = (t.pk for t in world.trajectories)
    ann3 = rubric_marks_read(world.rubric, RubricSource("human", "ann3"))
    assert ann3 == {t1: {0: ("not_met", ()), 1: ("not_met", ())}}
    with pytest.raises(ValueError, match="no user named 'nobody'"):
        rubric_marks_read(world.rubric, RubricSource("human", "nobody"))
    assert t3 not in ann3


def test_the_majority_per_criterion_and_its_evidence(project: Project) -> None:
    world = rubric_world(project)
    t1, t2, t3 = (t.pk for t in world.trajectories)
    assert rubric_marks_read(world.rubric, RubricSource("human", "majority")) == {
        t1: {0: ("met", (2,)), 1: ("not_met", (3,))},
        t2: {1: ("met", (0,))},  # criterion 0 is a tie
        t3: {0: ("na", ())},  # ann3 did not submit it
    }


def test_the_judge_source_is_registered_by_scoring(project: Project) -> None:
    world = rubric_world(project)
    marks = rubric_marks_read(world.rubric, RubricSource("judge", "judge"))
    assert marks[world.trajectories[0].pk] == {0: ("met", (2, 3)), 1: ("met", (3,))}
    with pytest.raises(ValueError, match="no scorer named 'nobody'"):
        rubric_marks_read(world.rubric, RubricSource("judge", "nobody"))
    assert rubric_source_choices(world.rubric) == [
        "rubric:human:majority",
        "rubric:human:ann1",
        "rubric:human:ann2",
        "rubric:human:ann3",
        "rubric:judge:judge",
    ]


def test_deleting_the_project_takes_its_rubrics_and_every_mark(project: Project) -> None:
    world = rubric_world(project)
    deletion = ProjectDeletion.objects.create(
        project=project, slug=project.slug, name=project.name, total_steps=12
    )
    project_deletion_run(deletion_id=deletion.pk, batch_steps=4)
    deletion.refresh_from_db()
    assert deletion.status == "done", deletion.error
    assert not Rubric.objects.filter(pk=world.rubric.pk).exists()
    assert not RubricMark.objects.exists() and not JudgeRubricMark.objects.exists()
    assert not Scorer.objects.filter(pk=world.judge.pk).exists()


def test_the_rubric_panel_shows_a_judges_marks_beside_the_users_read_only(
    project: Project, client: Client
) -> None:
    world = rubric_world(project)
    t1, _, t3 = world.trajectories
    ann1 = User.objects.get(username="ann1")
    client.force_login(ann1)
    url = reverse("rubric-panel", args=[t1.pk])
    panel = client.get(url, headers=HTMX).content.decode()
    rows = panel.split('class="rubric-row"')[1:]
    assert len(rows) == 2
    # Criterion 0: ann1's own mark (met, evidence 1 and 2) and, under it, the judge's.
    assert 'data-mark="met"' in rows[0] and 'data-evidence-step="1"' in rows[0]
    assert 'data-judge="judge" data-judge-mark="met"' in rows[0]
    judge_line = rows[0].split('data-judge="judge"')[1]
    assert "judge <strong>judge</strong>: met · evidence" in judge_line
    assert "?step=2" in judge_line and "?step=3" in judge_line
    assert 'data-judge="judge" data-judge-mark="met"' in rows[1]
    # Read-only: the judge's line carries no form and no button.
    assert "<form" not in judge_line.split("</div>")[0]
    assert "<button" not in judge_line.split("</div>")[0]
    # The third trajectory: the judge said not met and n/a.
    other = client.get(reverse("rubric-panel", args=[t3.pk]), headers=HTMX)
    assert 'data-judge-mark="not_met"' in other.content.decode()
    assert "judge <strong>judge</strong>: n/a" in other.content.decode()


def test_a_judges_rubric_marks_are_hidden_where_model_scores_are(project: Project) -> None:
    world = rubric_world(project)
    t3 = world.trajectories[2]
    project.settings = {"hide_model_scores": True}
    project.save(update_fields=["settings"])
    ann3 = User.objects.get(username="ann3")
    Membership.objects.filter(user=ann3, project=project).update(role=Membership.Role.ANNOTATOR)
    client = Client()
    client.force_login(ann3)
    # An annotator who has not submitted t3 sees no judge's marks on it; on t1, which
    # they submitted, they do; a reviewer of the project sees them on t3.
    url = reverse("rubric-panel", args=[t3.pk])
    hidden = client.get(url, headers=HTMX).content.decode()
    assert "Checks the answer" in hidden and "rubric-judge" not in hidden
    submitted = client.get(reverse("rubric-panel", args=[world.trajectories[0].pk]), headers=HTMX)
    assert 'data-judge="judge" data-judge-mark="met"' in submitted.content.decode()
    client.force_login(User.objects.get(username="ann1"))
    shown = client.get(url, headers=HTMX).content.decode()
    assert 'data-judge-mark="not_met"' in shown
