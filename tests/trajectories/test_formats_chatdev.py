"""The ChatDev parser on the real run log, and on bad input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import import_units, parser_for
from trajectories.formats.base import FileError, RecordError
from trajectories.formats.chatdev import parse

LOG = REALDATA / "chatdev" / "BMI Calculator_DefaultOrganization_20230918110521.log"
# The run's agents and how many steps each has: each phase's instruction (an input) and
# turn (labelable) are their agents'; the code updates and test reports are nobody's.
AGENTS = {
    "Programmer": 8,
    "Code Reviewer": 6,
    "Chief Executive Officer": 4,
    "Chief Technology Officer": 3,
    "Chief Product Officer": 2,
    "Counselor": 1,
    "": 12,
}
PHASES = [
    "DemandAnalysis",
    "LanguageChoose",
    "Coding",
    *["CodeReviewComment", "CodeReviewModification"] * 3,
    "EnvironmentDoc",
    "Reflection",
    "Manual",
]


def test_registered_with_its_log_suffix() -> None:
    assert parser_for("chatdev") is parse
    assert import_units("chatdev", LOG.parent) == [LOG]


def test_real_log_shape() -> None:
    # trajectories, steps, labelable steps, roots (the 12 phases' instructions), deepest
    # step (a code update below the turn that wrote the code), no tool calls.
    assert shape(trajectories(parse(LOG))) == (1, 36, 12, 12, 2, {})


def test_real_log_agents_turns_and_phases() -> None:
    [run] = trajectories(parse(LOG))
    assert run.external_id == "BMI Calculator_DefaultOrganization_20230918110521"
    assert run.task == (
        "Build a BMI calculator application that will take necessary inputs and then "
        "will out the BMI"
    )
    assert run.model_name == "GPT_3_5_TURBO"
    assert (run.outcome_reward, run.success) == (None, None)
    assert dict(Counter(step.agent for step in run.steps)) == AGENTS
    assert [phase["name"] for phase in run.metadata["phases"]] == PHASES
    turns = [step for step in run.steps if step.labelable]
    assert all((step.kind, step.role) == ("message", "assistant") for step in turns)
    assert [step.metadata["phase"] for step in turns] == PHASES
    # Every turn answers its phase's instruction, from the phase's other role.
    for step in turns:
        start = run.steps[step.metadata["parent"]]
        assert (start.role, start.labelable, start.agent) == ("user", False, step.metadata["with"])
        assert start.metadata["phase"] == step.metadata["phase"]
    first = run.steps[1]
    assert (first.agent, first.content) == ("Chief Product Officer", "<INFO> Application")
    assert first.metadata["tokens"] == {
        "prompt_tokens": 440,
        "completion_tokens": 4,
        "total_tokens": 444,
    }
    # The day comes before the month in ChatDev's dates.
    assert first.metadata["start"] == "2023-09-18T11:05:35"
    # The receiving agent's system prompt that ChatDev logs before each message is left out.
    assert not any(step.content.startswith("[ChatDev is") for step in run.steps)
    assert run.metadata["cost"] == 0.040864
    assert run.metadata["software_info"]["num_total_tokens"] == 12621
    assert run.metadata["software_info"]["duration"] == 423.0
    review = run.metadata["phases"][3]
    assert (review["composed_phase"], review["cycle"], review["assistant"]) == (
        "CodeReview",
        0,
        "Code Reviewer",
    )
    assert "composed_phase" not in run.metadata["phases"][9]  # EnvironmentDoc


def test_code_updates_and_tests_are_observations_below_the_turn() -> None:
    [run] = trajectories(parse(LOG))
    observed = [step for step in run.steps if step.kind == "observation"]
    assert Counter(step.metadata["event"] for step in observed) == {
        "Update Codes": 6,
        "Rewrite Codes": 4,
        "Test Reports": 1,
        "Test Info": 1,
    }
    for step in observed:
        assert not step.labelable
        assert run.steps[step.metadata["parent"]].agent == "Programmer"
    assert run.steps[6].content.startswith("main.py updated.")


def write_log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.log"
    path.write_text(text, encoding="utf-8")
    return path


HEAD = (
    "[2023-18-09 11:05:21 INFO] **[Preprocessing]**\n\n**task_prompt**: Build a clock\n\n"
    "[2023-18-09 11:05:23 INFO] System: **[chatting]**\n\n| **phase_name** | Coding |\n\n"
)


def test_a_bad_date_names_its_line_and_the_log_is_rejected(tmp_path: Path) -> None:
    turn = "[2023-31-31 11:05:35 INFO] Programmer: **Programmer<->CTO on : Coding, turn 0**\n"
    results = list(parse(write_log(tmp_path, HEAD + turn + "\nclock.py\n")))
    assert results == [
        RecordError(
            "line 9",
            "timestamp",
            "'2023-31-31 11:05:35' is not a date written as ChatDev does (year-day-month)",
        ),
        RecordError("line 1", "", "the log has no agent turn to make a step of"),
    ]


def test_a_log_without_a_task_is_an_error(tmp_path: Path) -> None:
    turn = "[2023-18-09 11:05:35 INFO] Programmer: **Programmer<->CTO on : Coding, turn 0**\n"
    results = list(parse(write_log(tmp_path, turn + "\ncode\n")))
    assert results == [RecordError("line 1", "task_prompt", "is missing; the log names no task")]


def test_a_turn_said_by_another_speaker_is_an_error(tmp_path: Path) -> None:
    turn = "[2023-18-09 11:05:35 INFO] Counselor: **Programmer<->CTO on : Coding, turn 0**\n"
    results = list(parse(write_log(tmp_path, HEAD + turn)))
    assert results[0] == RecordError(
        "line 9", "speaker", "is 'Counselor', but the turn says 'Programmer' speaks"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("\n\n", "is empty"),
        ('{"not": "a log"}\n', "line 1 is not a ChatDev log entry"),
    ],
)
def test_not_a_chatdev_log_is_a_file_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(FileError, match=message):
        list(parse(write_log(tmp_path, text)))


def test_not_utf8_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_bytes(HEAD.encode() + b"\xff\xfe")
    with pytest.raises(FileError, match="not UTF-8 text"):
        list(parse(path))
