"""The judge's rubric mode: the prompt (criteria and numbered steps), the strict reading
of its JSON answer without the database, a run on fixed replies from the test endpoint
(unreadable answers counted and kept, never turned into marks), and a run through a real
Celery worker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse

from labeling.models import Rubric
from labeling.services.rubrics import rubric_save
from scoring import services
from scoring.judges.config import DEFAULT_SYSTEM, DEFAULT_TEMPLATES, RUBRIC, template_check
from scoring.judges.modes import Log, LogStep, Prompt
from scoring.judges.rubric import RubricAnswer, rubric_read, rubric_request
from scoring.models import JudgeReply, JudgeRubricMark, Scorer, ScoringRun
from scoring.services.runners import ScoringError
from tests.factories import trajectory_with_steps
from tests.scoring.conftest import OpenAIServer
from tests.scoring.test_judge_runs import remote_judge, run_judge
from tests.waiting import wait_until
from trajectories.models import Project, Trajectory

CRITERIA: list[dict[str, Any]] = [
    {"text": "The answer is checked", "weight": 2},
    {"text": "Tests pass", "condition": "if the task asks for code"},
]


def answer(*marks: tuple[int, str, list[Any]]) -> str:
    body = {"criteria": [{"criterion": c, "mark": m, "evidence": e} for c, m, e in marks]}
    return f"The work is checked at step 1.\n```json\n{json.dumps(body)}\n```"


def read(text: str, criteria: int = 2, steps: int = 3) -> RubricAnswer:
    return rubric_read(text, criterion_count=criteria, step_indexes=list(range(steps)))


# --- Without the database --------------------------------------------------------------------


def test_the_prompt_lists_the_criteria_and_the_numbered_steps() -> None:
    template_check(RUBRIC, DEFAULT_SYSTEM, DEFAULT_TEMPLATES[RUBRIC])
    log = Log(7, "Add 2 and 2", (LogStep(70, 0, "", "2 + 2 = 4"), LogStep(71, 1, "", "check: 4")))
    request = rubric_request(Prompt(DEFAULT_SYSTEM, DEFAULT_TEMPLATES[RUBRIC]), log, CRITERIA)
    text = request.messages[-1]["content"]
    assert request.key == "t7" and request.trajectory == 7
    assert "Step 0: 2 + 2 = 4\n\nStep 1: check: 4" in text
    assert "Criterion 0 (weight 2): The answer is checked" in text
    assert "Criterion 1 (weight 1): Tests pass (applies only if the task asks for code)" in text
    assert '{"criteria": [{"criterion": 0, "mark": "met", "evidence": [2, 5]}]}' in text


def test_a_well_formed_answer_gives_a_mark_per_criterion() -> None:
    got = read(answer((1, "na", []), (0, "met", [2, 1, 1])))
    assert got.parsed and got.critique == "The work is checked at step 1."
    assert [(m.criterion, m.mark, m.evidence) for m in got.marks] == [
        (0, "met", (1, 2)),
        (1, "na", ()),
    ]
    # Bare JSON at the end (no fence) reads the same; the last object counts.
    bare = read(
        'Maybe {"x": 1}. Final: {"criteria": [{"criterion": 0, "mark": "not_met"},'
        ' {"criterion": 1, "mark": "met", "evidence": [0]}]}'
    )
    assert bare.parsed and [m.mark for m in bare.marks] == ["not_met", "met"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("It is all fine.", "no JSON object in the reply"),
        ('{"criteria": [{"criterion": 0, "mark": "met",}]}', "the JSON does not parse"),
        ('{"marks": []}', 'not an object with a "criteria" list'),
        (answer((0, "met", [])), "no answer for criterion 1"),
        (answer((0, "met", []), (0, "na", [])), "criterion 0 is named twice"),
        (answer((0, "met", []), (2, "na", [])), "criteria.1.criterion: 2 is not one of"),
        (answer((0, "maybe", []), (1, "na", [])), "criteria.0.mark: 'maybe' is not one of"),
        (answer((0, "met", [3]), (1, "na", [])), "criteria.0.evidence: 3 is not a step"),
        (answer((0, "met", ["1"]), (1, "na", [])), "criteria.0.evidence: '1' is not a step"),
        (
            '{"criteria": [{"criterion": 0, "mark": "met", "score": 1}]}',
            "criteria.0: unknown key score",
        ),
    ],
)
def test_anything_else_is_unreadable_and_gives_no_mark(text: str, error: str) -> None:
    got = read(text)
    assert not got.parsed and error in got.error and got.marks == ()


# --- Runs --------------------------------------------------------------------------------------


def rubric_project(project: Project, count: int = 3) -> tuple[Rubric, list[Trajectory]]:
    rubric = rubric_save(project=project, user_id=None, criteria=CRITERIA)
    trajectories = [
        trajectory_with_steps(project, [f"{n} + 1 = {n + 1}", "check", "done"], task=f"task {n}")
        for n in range(count)
    ]
    return rubric, trajectories


def scripted(server: OpenAIServer, *replies: str) -> None:
    server.control(
        replies_for=[{"contains": f"task {n}\n", "reply": r} for n, r in enumerate(replies)]
    )


def test_a_rubric_run_stores_each_readable_answers_marks_and_counts_the_rest(
    client: Client, project: Project, owner: User, openai_server: OpenAIServer
) -> None:
    rubric, (good, garbled, wrong_step) = rubric_project(project)
    scripted(
        openai_server,
        answer((0, "met", [2]), (1, "na", [])),
        "Met, I think.",
        answer((0, "met", [9]), (1, "na", [])),
    )
    scorer = remote_judge(project, openai_server, mode="rubric")
    run = run_judge(project, scorer)
    assert run.status == ScoringRun.Status.DONE, run.error
    assert run.parameters["rubric_id"] == rubric.pk and run.metrics["rubric"] == "rubric v1"
    marks = JudgeRubricMark.objects.filter(scorer=scorer).order_by("criterion")
    assert [(m.trajectory_id, m.criterion, m.mark, m.evidence) for m in marks] == [
        (good.pk, 0, "met", [2]),
        (good.pk, 1, "na", []),
    ]
    assert run.metrics["calls"] == 3 and run.metrics["parse_failures"] == 2
    assert run.metrics["rubric_marks"] == 2
    errors = dict(JudgeReply.objects.filter(run=run).values_list("trajectory_id", "parse_error"))
    assert errors[good.pk] == "" and errors[garbled.pk] == "no JSON object in the reply"
    assert "criteria.0.evidence: 9 is not a step" in errors[wrong_step.pk]
    assert marks[0].reply is not None
    assert marks[0].reply.critique == "The work is checked at step 1."
    # The run's row says what it filled and how many replies could not be read.
    client.force_login(owner)
    row = client.get(reverse("scoring-run-row", args=[run.pk]), HTTP_HX_REQUEST="true")
    html = row.content.decode()
    assert "rubric v1: 2 marks" in html and "<strong>2 unreadable</strong> of 3 replies" in html
    # Run again on what has no marks: only the two unreadable trajectories are asked.
    scripted(openai_server, "", answer((0, "not_met", []), (1, "met", [0])), "still no JSON")
    again = run_judge(project, scorer, only_unscored=True)
    assert again.metrics["calls"] == 2 and again.metrics["parse_failures"] == 1
    assert set(JudgeRubricMark.objects.values_list("trajectory_id", flat=True)) == {
        good.pk,
        garbled.pk,
    }


def test_a_rubric_run_needs_a_rubric_and_other_modes_take_none(
    project: Project, openai_server: OpenAIServer
) -> None:
    scorer = remote_judge(project, openai_server, mode="rubric")
    with pytest.raises(ScoringError, match="has none: name one"):
        services.scoring_run_start(project=project, scorer=scorer)
    rubric_save(project=project, user_id=None, criteria=CRITERIA)
    rubric_save(project=project, user_id=None, criteria=CRITERIA, name="safety")
    with pytest.raises(ScoringError, match="has 'rubric', 'safety': name one"):
        services.scoring_run_start(project=project, scorer=scorer)
    with pytest.raises(ScoringError, match="no rubric named 'style'"):
        services.scoring_run_start(project=project, scorer=scorer, rubric="style")
    with pytest.raises(CommandError, match="no rubric named 'style'"):
        call_command("score", project=project.slug, scorer=scorer.name, rubric="style")
    per_step = remote_judge(project, openai_server, name="per-step")
    with pytest.raises(ScoringError, match="only a judge in mode 'rubric' fills a rubric"):
        services.scoring_run_start(project=project, scorer=per_step, rubric="safety")


@pytest.mark.celery
def test_a_rubric_run_goes_through_a_real_worker(
    transactional_db: None, celery_worker: object, project: Project, openai_server: OpenAIServer
) -> None:
    _, trajectories = rubric_project(project, 2)
    scripted(
        openai_server,
        answer((0, "met", [1]), (1, "not_met", [0, 2])),
        answer((0, "not_met", []), (1, "na", [])),
    )
    scorer: Scorer = remote_judge(project, openai_server, mode="rubric")
    run = services.scoring_run_start(project=project, scorer=scorer)

    def finished() -> bool:
        run.refresh_from_db()
        return not run.is_active

    assert wait_until(finished, timeout=120)
    assert run.status == ScoringRun.Status.DONE, run.error
    marks = JudgeRubricMark.objects.filter(scorer=scorer, run=run)
    assert marks.count() == 4 and run.metrics["parse_failures"] == 0
    first = marks.get(trajectory=trajectories[0], criterion=1)
    assert (first.mark, first.evidence) == ("not_met", [0, 2])
