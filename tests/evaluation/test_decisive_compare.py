"""Decisive failures compared: the real Who&When labels (imported) against a model's
failure attributions (written as an LLM judge would, under ``model:<scorer>``) and
against a second annotator, on the page and through the API, with the numbers worked
out by hand."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from evaluation.decisive import decisive_compare
from labeling.models import TrajectoryLabel
from labeling.services import decisive_failure_set
from scoring import prm
from scoring.models import FailureVerdict, Scorer
from scoring.services import ScoringError, VerdictInput, failure_verdicts_write
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.conftest import state
from tests.labeling.test_decisive import who_and_when
from tests.trajectories.test_formats_mapped import WHO_AND_WHEN_COUNTS
from trajectories.models import Membership, Project, Trajectory

pytestmark = pytest.mark.django_db


@pytest.fixture
def logs(project: Project) -> dict[str, Trajectory]:
    return {name: who_and_when(project, name) for name in WHO_AND_WHEN_COUNTS}


@pytest.fixture
def judge(project: Project, logs: dict[str, Trajectory]) -> Scorer:
    """The imported labels: WebSurfer@12, Orchestrator@1, Excel_Expert@0, Lyrics_Expert@0,
    Mesopotamian_Number_Systems_Expert@1. The judge: right agent one step late; both
    right; no agent and step 2 (so that step's BusinessLogic_Expert: wrong, two apart);
    right agent two steps late; nothing on the fifth."""
    scorer = Scorer.objects.create(project=project, name="judge", kind=prm.EXTERNAL)
    failure_verdicts_write(
        scorer=scorer,
        verdicts=[
            VerdictInput(logs["Hand-Crafted/1.json"].pk, "WebSurfer", 13),
            VerdictInput(logs["Hand-Crafted/24.json"].pk, "Orchestrator (thought)", 1),
            VerdictInput(logs["Algorithm-Generated/1.json"].pk, "", 2, reason="counted wrong"),
            VerdictInput(logs["Algorithm-Generated/21.json"].pk, "Lyrics_Expert", 2),
        ],
    )
    return scorer


def test_against_a_model_worked_by_hand(project: Project, judge: Scorer) -> None:
    result = decisive_compare(project, reference="import:mapped", candidate="model:judge", k=1)
    metrics = result.metrics
    assert metrics.trajectories == 4
    assert (metrics.agent.correct, metrics.agent.total) == (3, 4)
    assert (metrics.step.correct, metrics.step.total) == (1, 4)
    assert (metrics.step_within.correct, metrics.step_within.total) == (2, 4)
    assert metrics.agent.low <= 0.75 <= metrics.agent.high
    two = decisive_compare(project, reference="import:mapped", candidate="model:judge", k=2)
    assert two.metrics.step_within.correct == 4
    assert FailureVerdict.objects.get(step=2, agent="BusinessLogic_Expert").reason == (
        "counted wrong"
    )
    with pytest.raises(ValueError, match="the same source"):
        decisive_compare(project, reference="model:judge", candidate="model:judge")
    with pytest.raises(ValueError, match="no scorer named 'nobody'"):
        decisive_compare(project, reference="import:mapped", candidate="model:nobody")


def test_model_verdicts_are_checked_all_or_nothing(
    project: Project, logs: dict[str, Trajectory], judge: Scorer
) -> None:
    before = list(FailureVerdict.objects.values_list("trajectory_id", "agent", "step"))
    hand = logs["Hand-Crafted/24.json"].pk
    with pytest.raises(ScoringError, match=rf"verdict 1 \(trajectory {hand}\), field 'step'"):
        failure_verdicts_write(
            scorer=judge,
            verdicts=[
                VerdictInput(logs["Algorithm-Generated/47.json"].pk, "", 1),
                VerdictInput(hand, "Orchestrator", 7),
            ],
        )
    with pytest.raises(ScoringError, match=r"field 'agent': 'WebSurfer' is not one of its"):
        failure_verdicts_write(scorer=judge, verdicts=[VerdictInput(hand, "WebSurfer", 1)])
    other = Project.objects.create(slug="other", name="Other")
    mine = Scorer.objects.create(project=other, name="judge", kind=prm.EXTERNAL)
    with pytest.raises(ScoringError, match="field 'trajectory': no such trajectory here"):
        failure_verdicts_write(scorer=mine, verdicts=[VerdictInput(hand, "Orchestrator", 1)])
    assert list(FailureVerdict.objects.values_list("trajectory_id", "agent", "step")) == before
    # Judging again replaces the verdict.
    failure_verdicts_write(scorer=judge, verdicts=[VerdictInput(hand, "", 3)])
    assert FailureVerdict.objects.get(trajectory_id=hand).step == 3


def test_against_another_annotator(
    project: Project, logs: dict[str, Trajectory], owner: User
) -> None:
    # The owner agrees on the agent of both Magentic-One logs and on one step.
    for name, step in (("Hand-Crafted/1.json", 12), ("Hand-Crafted/24.json", 3)):
        decisive_failure_set(state=state(owner, logs[name]), step=step)
    TrajectoryLabel.objects.filter(annotator=owner).update(status="submitted")
    result = decisive_compare(project, reference="import:mapped", candidate="human:owner", k=1)
    assert result.metrics.trajectories == 2
    assert (result.metrics.agent.correct, result.metrics.step.correct) == (2, 1)
    assert result.metrics.step_within.correct == 1
    assert [p.step_distance for p in result.pairs] == [0, 2]


def test_the_page_shows_the_numbers_and_the_pairs(
    client: Client, project: Project, judge: Scorer, annotator: User
) -> None:
    client.force_login(annotator)
    url = reverse("compare-decisive", args=[project.slug])
    html = client.get(url).content.decode()
    # Left out: the import against the model.
    assert '<option value="import:mapped" selected>' in html
    assert '<option value="model:judge" selected>' in html
    assert "4 trajectories judged by both" in html
    agent_row = html.split('id="decisive-agent-accuracy"')[1].split("</tr>")[0]
    assert "75%" in agent_row and "3 of 4" in agent_row
    step_row = html.split('id="decisive-step-accuracy"')[1].split("</tr>")[0]
    assert "25%" in step_row
    within = html.split('id="decisive-step-within"')[1].split("</tr>")[0]
    assert "±1" in within and "50%" in within
    assert html.count("<strong>differs</strong>") == 1
    html = client.get(url, {"k": "2"}).content.decode()
    assert "100%" in html.split('id="decisive-step-within"')[1].split("</tr>")[0]
    bad = client.get(url, {"candidate": "model:nobody"}).content.decode()
    assert "no scorer named" in bad and 'id="decisive-metrics"' not in bad
    assert client.get(url, {"k": "-3"}).status_code == 200
    # Linked from the compare page and the project home.
    assert url in client.get(reverse("compare", args=[project.slug])).content.decode()
    assert url in client.get(reverse("project-home", args=[project.slug])).content.decode()


def test_the_page_says_what_it_needs(client: Client, project: Project, annotator: User) -> None:
    client.force_login(annotator)
    html = client.get(reverse("compare-decisive", args=[project.slug])).content.decode()
    assert 'id="decisive-none"' in html


def test_api(client: Client, project: Project, judge: Scorer, outsider: User) -> None:
    member = UserFactory.create(username="member")
    MembershipFactory.create(user=member, project=project, role=Membership.Role.ANNOTATOR)
    client.force_login(member)
    url = reverse("api-compare-decisive")
    data = client.get(
        url, {"project": project.slug, "reference": "import:mapped", "candidate": "model:judge"}
    ).json()
    assert data["reference"] == "import:mapped" and data["candidate"] == "model:judge"
    assert data["trajectories"] == 4 and data["k"] == 1
    assert data["agent_accuracy"]["correct"] == 3 and data["agent_accuracy"]["value"] == 0.75
    assert data["step_accuracy"] == {
        **data["step_accuracy"],
        "correct": 1,
        "total": 4,
        "value": 0.25,
    }
    assert data["step_within_k_accuracy"]["correct"] == 2
    low, high = data["agent_accuracy"]["low"], data["agent_accuracy"]["high"]
    assert 0 <= low <= 0.75 <= high <= 1
    bad = client.get(url, {"project": project.slug, "reference": "mc", "candidate": "x"})
    assert bad.status_code == 400 and "unknown decisive-failure source" in bad.json()["detail"]
    client.force_login(outsider)
    query = {"project": project.slug, "reference": "import:mapped", "candidate": "model:judge"}
    assert client.get(url, query).status_code == 404
