"""A question in plain language against the stand-in judge endpoint: the judge's reading
becomes the list's filters (names the language refuses are shown, not applied), the
selected trajectories are read one by one and the matches carry their step and reason;
unreadable replies are counted; the page asks and shows, members only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from discovery.question_models import Question, QuestionAnswer
from discovery.question_services import (
    QuestionError,
    _candidates_read,
    question_ask,
    question_run,
)
from scoring import services
from scoring.models import Scorer
from tests.conftest import JUDGE_KEY_ENV, JUDGE_NAME, OpenAIServer
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project, Trajectory
from trajectories.selection import SelectionError

pytestmark = pytest.mark.django_db

PROPOSAL = json.dumps(
    {
        "filters": {"outcome": "failure", "mood": "grumpy", "max_steps": "many"},
        "criterion": "The agent stops trying and tells the user it cannot help.",
    }
)


def judge(project: Project, server: OpenAIServer) -> Scorer:
    return services.judge_create(
        name="asker",
        model_ref=JUDGE_NAME,
        project=project,
        parameters={
            "backend": "remote",
            "base_url": server.base_url,
            "api_key_env": JUDGE_KEY_ENV,
            "max_tokens": 64,
            "concurrency": 2,
        },
    )


def verdict(match: bool, step: int | None, reason: str) -> str:
    return json.dumps({"match": match, "step": step, "reason": reason})


@pytest.fixture
def runs(project: Project) -> dict[str, Trajectory]:
    return {
        "gave-up": trajectory_with_steps(
            project,
            ["Let me check the booking.", "I am unable to assist with changing it."],
            external_id="gave-up",
            success=False,
        ),
        "kept-going": trajectory_with_steps(
            project,
            ["The tool failed.", "Retrying with the other id."],
            external_id="kept-going",
            success=False,
        ),
        "garbled": trajectory_with_steps(
            project, ["Something odd happens here."], external_id="garbled", success=False
        ),
        "won": trajectory_with_steps(
            project, ["I am unable to assist, sorry."], external_id="won", success=True
        ),
    }


def test_the_judge_proposes_filters_and_answers_with_steps_and_reasons(
    project: Project, owner: User, openai_server: OpenAIServer, runs: dict[str, Trajectory]
) -> None:
    openai_server.control(
        max_context=8192,  # the filters' list is longer than the tiny model's context
        replies_for=[
            {
                "contains": "unable to assist with changing",
                "reply": verdict(True, 1, "It refuses."),
            },
            {"contains": "Retrying with the other id", "reply": verdict(False, None, "Retries.")},
            {"contains": "Something odd", "reply": "I think so, maybe."},
            # Last: every candidate's prompt repeats the question.
            {"contains": "Question: runs where the agent gave up", "reply": PROPOSAL},
        ],
    )
    question = question_ask(
        project=project,
        user=owner,
        text="runs where the agent gave up",
        judge=judge(project, openai_server),
    )
    question_run(question.pk)
    question.refresh_from_db()

    assert question.status == Question.Status.DONE, question.error
    # outcome taken; an unknown name and a bad value refused, each with why.
    assert question.filters == {"origin": "", "outcome": "failure"}
    assert set(question.refused) == {"mood", "max_steps"}
    assert "unknown filter" in question.refused["mood"]
    assert question.criterion.startswith("The agent stops trying")
    # The success was never read; three failures were.
    assert (question.total, question.done, question.matched, question.unreadable) == (3, 3, 1, 1)
    match = QuestionAnswer.objects.get(question=question, matched=True)
    assert match.trajectory == runs["gave-up"] and match.step is not None
    assert match.step.index == 1 and match.reason == "It refuses."
    garbled = QuestionAnswer.objects.get(question=question, trajectory=runs["garbled"])
    assert "no JSON object" in garbled.problem and not garbled.matched
    # The criterion went to the judge with each trajectory.
    asked = openai_server.stats()["asked"]
    assert sum("What to check: The agent stops trying" in text for text in asked) == 3

    # Run again (a redelivery): nothing is asked twice.
    Question.objects.filter(pk=question.pk).update(status=Question.Status.RUNNING)
    requests = openai_server.stats()["requests"]
    question_run(question.pk)
    assert openai_server.stats()["requests"] == requests
    assert QuestionAnswer.objects.filter(question=question).count() == 3


def test_given_filters_skip_the_proposal_and_bad_ones_are_refused(
    project: Project, owner: User, openai_server: OpenAIServer, runs: dict[str, Trajectory]
) -> None:
    openai_server.control(max_context=8192, fixed_reply=verdict(True, 0, "Yes."))
    scorer = judge(project, openai_server)
    question = question_ask(
        project=project,
        user=owner,
        text="which runs succeeded?",
        judge=scorer,
        filters={"outcome": "success"},
    )
    question_run(question.pk)
    question.refresh_from_db()
    assert question.status == Question.Status.DONE and question.proposed == {}
    assert [a.trajectory.external_id for a in question.answers.all()] == ["won"]
    assert openai_server.stats()["requests"] == 1
    with pytest.raises(SelectionError, match="bogus"):
        question_ask(project=project, user=owner, text="x", judge=scorer, filters={"bogus": "1"})
    with pytest.raises(QuestionError, match="Ask a question"):
        question_ask(project=project, user=owner, text="  ", judge=scorer)
    other = Project.objects.create(slug="other", name="Other")
    with pytest.raises(QuestionError, match="Not an LLM judge of this project"):
        question_ask(project=other, user=owner, text="x", judge=scorer)


def test_a_judge_that_cannot_be_reached_fails_the_question(
    project: Project, owner: User, runs: dict[str, Trajectory]
) -> None:
    scorer = services.judge_create(
        name="gone",
        model_ref=JUDGE_NAME,
        project=project,
        parameters={"backend": "remote", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0},
    )
    question = question_ask(project=project, user=owner, text="anything?", judge=scorer)
    question_run(question.pk)
    question.refresh_from_db()
    assert question.status == Question.Status.FAILED
    assert "cannot reach the judge endpoint" in question.error


def test_the_page_asks_for_managers_and_shows_members_only(
    client: Client,
    project: Project,
    owner: User,
    openai_server: OpenAIServer,
    runs: dict[str, Trajectory],
    django_capture_on_commit_callbacks: object,
) -> None:
    scorer = judge(project, openai_server)
    page = reverse("question-list", args=[project.slug])
    client.force_login(owner)
    assert client.get(page).status_code == 200
    refused = client.post(page, {"text": "x", "judge": scorer.pk, "limit": 5, "colour": "red"})
    assert refused.status_code == 400 and b"unknown field: colour" in refused.content
    bad = client.post(page, {"text": "x", "judge": scorer.pk, "limit": 5, "filters": "bogus=1"})
    assert bad.status_code == 400 and b"bogus" in bad.content
    assert not Question.objects.exists()

    annotator = UserFactory.create()
    MembershipFactory.create(user=annotator, project=project, role=Membership.Role.ANNOTATOR)
    client.force_login(annotator)
    assert client.post(page, {"text": "x", "judge": scorer.pk, "limit": 5}).status_code == 403
    question = Question.objects.create(project=project, judge=scorer, judge_name="asker", text="q?")
    assert client.get(reverse("question-detail", args=[question.pk])).status_code == 200

    assert client.post(reverse("question-cancel", args=[question.pk])).status_code == 403
    client.force_login(owner)
    listed = client.get(page)
    assert f'id="question-{question.pk}"'.encode() in listed.content
    assert b"Cancel" in listed.content  # queued, and the owner may cancel
    cancelled = client.post(reverse("question-cancel", args=[question.pk]), HTTP_HX_REQUEST="true")
    assert cancelled.status_code == 200 and b"status-cancelled" in cancelled.content
    question.refresh_from_db()
    assert question.status == Question.Status.CANCELLED
    assert question_run(question.pk) is None  # a cancelled question asks the judge nothing
    assert openai_server.stats()["requests"] == 0

    client.force_login(UserFactory.create())
    assert client.get(page).status_code == 404
    assert client.get(reverse("question-detail", args=[question.pk])).status_code == 404


def test_the_api_asks_lists_answers_and_refuses_by_name(
    project: Project, owner: User, openai_server: OpenAIServer, runs: dict[str, Trajectory]
) -> None:
    from rest_framework.test import APIClient

    openai_server.control(max_context=8192, fixed_reply=verdict(True, 0, "It gave up."))
    judge(project, openai_server)
    api = APIClient()
    api.force_authenticate(owner)
    url = f"/api/v1/projects/{project.slug}/questions/"
    refused = api.post(url, {"text": "x", "judge": "asker", "colour": 1}, format="json")
    assert refused.status_code == 400 and "colour" in refused.json()
    no_judge = api.post(url, {"text": "x", "judge": "nobody"}, format="json")
    assert no_judge.status_code == 400 and "nobody" in no_judge.json()["judge"][0]
    bad = api.post(url, {"text": "x", "judge": "asker", "filters": {"bogus": 1}}, format="json")
    assert bad.status_code == 400 and "bogus" in bad.json()["filters"]
    asked = api.post(
        url,
        {"text": "which won?", "judge": "asker", "filters": {"outcome": "success"}, "limit": 5},
        format="json",
    )
    assert asked.status_code == 202, asked.json()
    body = asked.json()
    assert body["status"] == "queued" and body["filters"] == {"origin": "", "outcome": "success"}
    question_run(body["id"])
    detail = api.get(f"/api/v1/questions/{body['id']}/").json()
    assert detail["status"] == "done" and detail["matched"] == 1
    assert detail["answers"] == [
        {
            "trajectory": runs["won"].pk,
            "step": runs["won"].steps.get(index=0).pk,
            "step_index": 0,
            "matched": True,
            "reason": "It gave up.",
            "problem": "",
        }
    ]
    assert [q["id"] for q in api.get(url).json()] == [body["id"]]


def test_the_candidates_are_read_in_two_queries_however_many(
    runs: dict[str, Trajectory], django_assert_num_queries: Any
) -> None:
    """One query for the tasks and one for every candidate's steps, not one per
    trajectory; each candidate keeps its steps in order, and the candidates their order."""
    order = [runs[name].pk for name in ("garbled", "gave-up", "kept-going")]
    with django_assert_num_queries(2):
        read = _candidates_read(order)
    assert list(read) == order
    task, steps = read[runs["gave-up"].pk]
    assert task == runs["gave-up"].task
    assert [(index, content) for _id, index, _k, _a, content, _t in steps] == [
        (0, "Let me check the booking."),
        (1, "I am unable to assist with changing it."),
    ]
    with django_assert_num_queries(2):
        assert list(_candidates_read([runs["won"].pk])) == [runs["won"].pk]
