"""Rubrics and episode verdicts (issue #36): the score, criteria checks, the services
(versions, marks with evidence, history, permission, errors naming the field), blind
mode, the panels and the rubric page, and the API."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import (
    EpisodeVerdict,
    EpisodeVerdictEvent,
    LabelSchema,
    Queue,
    Rubric,
    RubricMark,
    RubricMarkEvent,
)
from labeling.rubrics import RubricInvalid, criteria_clean, next_mark, rubric_score
from labeling.selectors.rubrics import episode_verdicts, rubric_results, rubrics_active
from labeling.services import LabelingError, NotAllowed, StaleSchema, trajectory_submit
from labeling.services.rubrics import episode_verdict_set, rubric_mark_set, rubric_save
from tests.labeling.conftest import leased_state, state
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
CRITERIA = [
    {"text": "Sets up the equation", "weight": 2},
    {"text": "Solves it", "weight": 1},
    {"text": "Cites a tool result", "weight": 3, "condition": "when a tool was used"},
]


# --- Plain data ------------------------------------------------------------------------------


def test_score_is_the_weighted_share_met_with_na_left_out() -> None:
    criteria = criteria_clean(CRITERIA)
    assert rubric_score(criteria, {}) is None
    assert rubric_score(criteria, {2: "na"}) is None
    assert rubric_score(criteria, {0: "met", 1: "not_met", 2: "na"}) == pytest.approx(2 / 3)
    assert rubric_score(criteria, {0: "met", 1: "met", 2: "not_met"}) == pytest.approx(0.5)
    assert [next_mark(m) for m in ("", "met", "not_met", "na")] == ["met", "not_met", "na", "met"]


@pytest.mark.parametrize(
    ("criteria", "words"),
    [
        ([], "criteria: a rubric is a non-empty list"),
        ([{"text": " "}], "criteria.0.text: a criterion needs its text"),
        ([{"text": "a"}, {"text": "b", "weight": 0}], "criteria.1.weight: a number above 0"),
        ([{"text": "a", "weight": "x"}], "criteria.0.weight: 'x' is not a number"),
        ([{"text": "a", "wieght": 2}], "criteria.0: unknown field wieght"),
        (["a"], "criteria.0: a criterion is an object"),
    ],
)
def test_criteria_errors_name_the_criterion_and_field(criteria: Any, words: str) -> None:
    with pytest.raises(RubricInvalid, match=words):
        criteria_clean(criteria)


# --- Services --------------------------------------------------------------------------------


@pytest.fixture
def rubric(project: Project, owner: User) -> Rubric:
    return rubric_save(project=project, user_id=owner.pk, criteria=CRITERIA)


def test_saving_makes_versions_and_only_the_newest_is_current(
    project: Project, owner: User, rubric: Rubric, researcher: User, trajectory: Trajectory
) -> None:
    assert (rubric.version, rubric.criteria[2]["condition"]) == (1, "when a tool was used")
    rubric_mark_set(
        state=state(researcher, trajectory), rubric_id=rubric.pk, criterion=0, mark="met"
    )
    second = rubric_save(project=project, user_id=owner.pk, criteria=CRITERIA[:2])
    assert second.version == 2 and rubrics_active(project) == [second]
    # The mark on v1 stays with v1; marking v1 now is refused as stale.
    assert RubricMark.objects.get().rubric_id == rubric.pk
    with pytest.raises(StaleSchema, match="changed \\(this page uses v1, the project now uses v2"):
        rubric_mark_set(
            state=state(researcher, trajectory), rubric_id=rubric.pk, criterion=1, mark="met"
        )
    with pytest.raises(LabelingError, match=r"criteria\.0\.weight") as refused:
        rubric_save(project=project, user_id=owner.pk, criteria=[{"text": "a", "weight": -1}])
    assert refused.value.field == "criteria"
    assert Rubric.objects.filter(project=project).count() == 2


def test_marks_evidence_history_and_score(
    rubric: Rubric, researcher: User, trajectory: Trajectory
) -> None:
    mine = state(researcher, trajectory)
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=0, mark="met", evidence=[3, 1, 1])
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=0, toggle_step=2)
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=0, toggle_step=1)
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=1, mark="not_met")
    rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=2, mark="na")
    assert RubricMark.objects.get(criterion=0).evidence == [2, 3]
    [result] = rubric_results(mine)
    assert result.own and result.score == pytest.approx(2 / 3)
    assert [(r.mark, r.evidence) for r in result.rows] == [
        ("met", [2, 3]),
        ("not_met", []),
        ("na", []),
    ]
    # Every change is kept: insert, two toggles, then the other two inserts.
    events = RubricMarkEvent.objects.filter(criterion=0).order_by("pgh_id")
    assert [list(e.evidence) for e in events] == [[1, 3], [1, 2, 3], [2, 3]]
    assert events[0].pgh_context["action"] == "rubric"
    # Clearing takes the mark away (and leaves a delete event).
    assert rubric_mark_set(state=mine, rubric_id=rubric.pk, criterion=2, mark="") is None
    assert RubricMarkEvent.objects.filter(criterion=2, pgh_label="delete").count() == 1
    assert rubric_results(mine)[0].score == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"criterion": 3, "mark": "met"}, "criterion", "has criteria 0 to 2, not 3"),
        ({"criterion": 0, "mark": "yes"}, "mark", "'yes' is not one of met, not_met, na"),
        ({"criterion": 0, "mark": "met", "evidence": [5]}, "evidence", "step 5 is not in"),
        ({"criterion": 0, "toggle_step": 1}, "mark", "Mark the criterion"),
    ],
)
def test_bad_marks_name_the_field_and_write_nothing(
    rubric: Rubric,
    researcher: User,
    trajectory: Trajectory,
    change: dict[str, Any],
    field: str,
    words: str,
) -> None:
    with pytest.raises(LabelingError) as refused:
        rubric_mark_set(state=state(researcher, trajectory), rubric_id=rubric.pk, **change)
    assert refused.value.field == field and words in refused.value.message
    assert not RubricMark.objects.exists()


def test_an_annotator_needs_a_lease_and_blind_mode_hides_others(
    project: Project,
    rubric: Rubric,
    researcher: User,
    annotator: User,
    annotator2: User,
    trajectory: Trajectory,
    queue: Queue,
) -> None:
    with pytest.raises(NotAllowed):
        rubric_mark_set(
            state=state(annotator, trajectory), rubric_id=rubric.pk, criterion=0, mark="met"
        )
    project.settings = {"blind_labeling": True}
    project.save(update_fields=["settings"])
    first = leased_state(annotator, queue)
    rubric_mark_set(state=first, rubric_id=rubric.pk, criterion=0, mark="met")
    episode_verdict_set(state=first, outcome="success", critique="fine")
    second = leased_state(annotator2, queue)
    # The second annotator sees only their own (empty) result and no verdicts.
    assert [(r.annotator, r.marked) for r in rubric_results(second)] == [("", 0)]
    assert episode_verdicts(second) == []
    # A reviewer sees both; the first annotator, once submitted, sees others too.
    rubric_mark_set(state=second, rubric_id=rubric.pk, criterion=1, mark="met")
    assert {r.annotator for r in rubric_results(state(researcher, trajectory)) if r.marked} == {
        "annotator",
        "annotator2",
    }
    trajectory_submit(state=state(annotator, trajectory, queue), finish_reason="give_up")
    after = state(annotator, trajectory, queue)
    assert {r.annotator for r in rubric_results(after) if r.marked} == {"annotator", "annotator2"}
    assert len(episode_verdicts(after)) == 1


# --- Episode verdicts ------------------------------------------------------------------------


@pytest.fixture
def team_run(project: Project, schema: LabelSchema) -> Trajectory:
    trajectory = Trajectory.objects.create(
        project=project, external_id="team", step_count=3, content_hash="team"
    )
    Step.objects.bulk_create(
        Step(trajectory=trajectory, index=i, kind="message", role="assistant", agent=a, content=a)
        for i, a in enumerate(["planner", "coder", "planner"])
    )
    return trajectory


def test_episode_and_per_agent_verdicts_with_history(
    team_run: Trajectory, researcher: User, schema: LabelSchema
) -> None:
    mine = state(researcher, team_run)
    episode_verdict_set(state=mine, outcome="failure", failure_mode="logic error", critique="x")
    episode_verdict_set(state=mine, agent="coder", outcome="failure", critique="<b>bug</b>")
    episode_verdict_set(state=mine, agent="planner", outcome="success")
    episode_verdict_set(state=mine, outcome="partial", failure_mode="logic error", critique="x")
    assert [(v.agent, v.outcome) for v in episode_verdicts(mine)] == [
        ("", "partial"),
        ("coder", "failure"),
        ("planner", "success"),
    ]
    episodes = EpisodeVerdictEvent.objects.filter(agent="").order_by("pgh_id")
    assert [e.outcome for e in episodes] == ["failure", "partial"]
    # All answers empty clears a verdict.
    assert episode_verdict_set(state=mine, agent="planner") is None
    assert not EpisodeVerdict.objects.filter(agent="planner").exists()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"agent": "tester", "outcome": "success"}, "agent", "'tester' is not one of"),
        ({"outcome": "won"}, "outcome", "'won' is not one of success, partial, failure"),
        ({"failure_mode": "typo"}, "failure_mode", "not in the project's taxonomy"),
    ],
)
def test_bad_verdicts_name_the_field(
    team_run: Trajectory, researcher: User, change: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(LabelingError) as refused:
        episode_verdict_set(state=state(researcher, team_run), **change)
    assert refused.value.field == field and words in refused.value.message
    assert not EpisodeVerdict.objects.exists()


# --- Pages -----------------------------------------------------------------------------------


def test_rubric_page_admins_save_others_read(
    client: Client, project: Project, owner: User, annotator: User, outsider: User
) -> None:
    url = reverse("rubric-edit", args=[project.slug])
    client.force_login(owner)
    posted = client.post(
        url,
        {
            "name": "quality",
            "text": ["Plans first", "", "Tests <it>"],
            "weight": ["2", "", ""],
            "condition": ["", "", "if code"],
        },
    )
    assert posted.status_code == 302
    [saved] = rubrics_active(project)
    assert saved.criteria == [
        {"text": "Plans first", "weight": 2.0, "condition": ""},
        {"text": "Tests <it>", "weight": 1.0, "condition": "if code"},
    ]
    bad = client.post(url, {"name": "quality", "text": ["x"], "weight": ["-2"]}, follow=True)
    assert "criteria.0.weight: a number above 0" in bad.content.decode()
    client.force_login(annotator)
    page = client.get(url).content.decode()
    assert "Tests &lt;it&gt;" in page and "Only project admins can change the rubric" in page
    assert client.post(url, {"text": ["y"]}).status_code == 403
    client.force_login(outsider)
    assert client.get(url).status_code == 404


def test_panels_mark_and_link_through_htmx(
    client: Client, rubric: Rubric, researcher: User, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(researcher)
    url = reverse("rubric-panel", args=[trajectory.pk])
    panel = client.get(url, headers=HTMX).content.decode()
    assert "Sets up the equation" in panel and "<html" not in panel
    saved = client.post(url, {"rubric": rubric.pk, "criterion": 0, "mark": "met"}, headers=HTMX)
    assert saved.status_code == 200 and "score 1.00" in saved.content.decode()
    linked = client.post(url, {"rubric": rubric.pk, "criterion": 0, "toggle_step": 4}, headers=HTMX)
    assert 'data-evidence-step="4"' in linked.content.decode()
    refused = client.post(
        url, {"rubric": rubric.pk, "criterion": 0, "toggle_step": 9}, headers=HTMX
    )
    assert refused.status_code == 400 and refused["HX-Retarget"] == "#flash"
    episode = reverse("episode-panel", args=[trajectory.pk])
    answered = client.post(
        episode,
        {"outcome": "failure", "failure_mode": "logic error", "critique": "<b>no</b>"},
        headers=HTMX,
    )
    assert answered.status_code == 200 and "Saved (episode)" in answered.content.decode()
    assert "&lt;b&gt;no&lt;/b&gt;" in answered.content.decode()
    detail = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    assert f'hx-get="{url}"' in detail and f'hx-get="{episode}"' in detail
    assert "<kbd>v</kbd>" in detail and "rubrics.js" in detail


# --- API -------------------------------------------------------------------------------------


def test_api_rubrics_marks_and_verdicts(
    client: Client,
    project: Project,
    owner: User,
    researcher: User,
    trajectory: Trajectory,
    outsider: User,
    schema: LabelSchema,
) -> None:
    rubrics = reverse("api-project-rubrics", args=[project.slug])
    client.force_login(owner)
    created = client.post(rubrics, {"criteria": CRITERIA}, "application/json")
    assert created.status_code == 201, created.content
    rubric_id = created.json()["id"]
    assert client.post(rubrics, {"criteria": CRITERIA, "nmae": "x"}, "application/json").json() == {
        "nmae": ["Unknown field."]
    }
    bad = client.post(rubrics, {"criteria": [{"text": "a", "weight": 0}]}, "application/json")
    assert bad.status_code == 400 and "criteria.0.weight" in bad.json()["criteria"]
    client.force_login(researcher)
    assert client.post(rubrics, {"criteria": CRITERIA}, "application/json").status_code == 403
    assert [r["version"] for r in client.get(rubrics).json()] == [1]

    url = reverse("api-trajectory-rubric", args=[trajectory.pk])
    marked = client.post(
        url,
        {
            "rubric": rubric_id,
            "marks": [
                {"criterion": 0, "mark": "met", "evidence": [1, 2]},
                {"criterion": 1, "mark": "not_met"},
            ],
        },
        "application/json",
    )
    assert marked.status_code == 200, marked.content
    assert marked.json()["score"] == pytest.approx(2 / 3)
    assert marked.json()["criteria"][0]["evidence"] == [1, 2]
    # All or nothing: the second mark's bad evidence keeps the first from being written.
    refused = client.post(
        url,
        {
            "rubric": rubric_id,
            "marks": [{"criterion": 2, "mark": "met"}, {"criterion": 1, "evidence": [7]}],
        },
        "application/json",
    )
    assert refused.status_code == 400 and "marks.1.evidence" in refused.json()
    assert not RubricMark.objects.filter(criterion=2).exists()
    [listed] = client.get(url).json()
    assert listed["annotator"] == "researcher" and listed["score"] == pytest.approx(2 / 3)

    episode = reverse("api-trajectory-episode", args=[trajectory.pk])
    saved = client.post(episode, {"outcome": "failure", "critique": "gave up"}, "application/json")
    assert saved.status_code == 200 and saved.json()["outcome"] == "failure"
    assert client.post(episode, {"outcome": "won"}, "application/json").status_code == 400
    assert client.get(episode).json()[0]["critique"] == "gave up"
    client.force_login(outsider)
    for each in (url, episode, rubrics):
        assert client.get(each).status_code == 404
