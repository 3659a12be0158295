"""The strict reading of a judge's replies to a question (Django-free)."""

from __future__ import annotations

import pytest

from discovery import questions
from discovery.questions import ReplyUnreadable, ShownStep


def test_a_proposal_keeps_its_filters_and_one_line_criterion() -> None:
    reply = (
        'Sure:\n```json\n{"filters": {"outcome": "failure", "max_steps": 10, "q": ""},\n'
        ' "criterion": "the agent\n gives up"}\n```'
    )
    proposal = questions.proposal_parse(reply)
    assert proposal.filters == {"outcome": "failure", "max_steps": 10}
    assert proposal.criterion == "the agent gives up"


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("no json here", "no JSON object"),
        ('{"filters": [1]}', '"filters" is not an object'),
        ('{"filters": {}, "criterion": 3}', '"criterion" is not text'),
        ("{'filters': {}}", "does not parse"),
    ],
)
def test_an_unreadable_proposal_says_why(reply: str, problem: str) -> None:
    with pytest.raises(ReplyUnreadable, match=problem):
        questions.proposal_parse(reply)


def test_a_verdict_names_a_step_of_the_trajectory_or_none() -> None:
    verdict = questions.verdict_parse(
        '{"match": true, "step": 2, "reason": "It says it gives up."}', [0, 1, 2]
    )
    assert (verdict.matched, verdict.step, verdict.reason) == (True, 2, "It says it gives up.")
    assert questions.verdict_parse('{"match": false, "step": null}', [0]).step is None
    with pytest.raises(ReplyUnreadable, match="not a step of the trajectory"):
        questions.verdict_parse('{"match": true, "step": 7, "reason": ""}', [0, 1])
    with pytest.raises(ReplyUnreadable, match='"match" is not true or false'):
        questions.verdict_parse('{"match": "yes"}', [0])
    with pytest.raises(ReplyUnreadable, match="not a step number"):
        questions.verdict_parse('{"match": true, "step": true}', [0, 1])
    long = questions.verdict_parse('{"match": true, "reason": "' + "x" * 1000 + '"}', [0])
    assert len(long.reason) == questions.REASON_CHARS


def test_a_long_trajectory_keeps_its_start_and_end() -> None:
    steps = [ShownStep(i, "message", "", f"step {i} " + "y" * 900) for i in range(100)]
    shown = questions.shown_steps(steps)
    assert len(shown) <= questions.TRAJECTORY_CHARS + 100
    assert shown.startswith("[0] message: step 0") and "[99] message: step 99" in shown
    assert "steps left out" in shown
    one = questions.shown_steps([ShownStep(3, "tool_call", "coder", "z" * 5000)])
    assert one.startswith("[3] tool_call (coder): ") and one.endswith("…[cut]")


def test_the_judge_is_offered_only_filters_it_can_fill() -> None:
    offered = {spec.name for spec in questions.proposable_filters()}
    assert {"outcome", "q", "model"} <= offered
    assert "similar_step" not in offered
    prompt = questions.filter_messages("runs that gave up")[1]["content"]
    assert "- outcome: success, failure or unknown. [success, failure, unknown]" in prompt
    assert prompt.rstrip().endswith('or "" if the filters say it all.')
