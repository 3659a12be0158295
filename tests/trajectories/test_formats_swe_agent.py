"""The SWE-agent parser on the four real ``.traj`` files, and on small damaged runs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedStep, ParsedTrajectory, RecordError
from trajectories.formats.swe_agent import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
SWE_AGENT = REPO_ROOT.parent / "shared" / "realdata" / "swe_agent"
PYDICOM = SWE_AGENT / "pydicom__pydicom-1458.traj"
TEST_REPO = SWE_AGENT / "swe-agent__test-repo-i1.traj"
MARSHMALLOW = SWE_AGENT / "marshmallow-code__marshmallow-1867.function_calling_replace.demo.traj"
CTF = SWE_AGENT / "ctf_crypto_BabyEncryption.demo.traj"

# Turns per file (the README's 12, 5, 11 and 16), and steps after the rule: thought
# (left out when blank), action and observation per turn. The CTF demonstration has two
# turns with a blank thought.
TURNS = {PYDICOM: 12, TEST_REPO: 5, MARSHMALLOW: 11, CTF: 16}
STEPS = {PYDICOM: 36, TEST_REPO: 15, MARSHMALLOW: 33, CTF: 46}


def only_trajectory(path: Path) -> ParsedTrajectory:
    [result] = list(parse(path))
    assert isinstance(result, ParsedTrajectory), result
    return result


def run(**change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "environment": "swe_main",
        "trajectory": [
            {
                "action": "find_file setup.py\n",
                "observation": "Found 1 matches",
                "response": "Let me look.\n```\nfind_file setup.py\n```",
                "thought": "Let me look.",
                "state": '{"open_file": "n/a"}',
            },
            {"action": "submit\n", "observation": "", "response": "", "thought": ""},
        ],
        "history": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "DEMONSTRATION ...", "is_demo": True},
            {"role": "user", "content": "ISSUE: setup.py is broken"},
        ],
        "info": {"exit_status": "submitted", "submission": "diff --git a/setup.py"},
    }
    record.update(change)
    return record


def write_run(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_registered_under_its_format_name() -> None:
    assert parser_for("swe-agent") is parse


@pytest.mark.parametrize("path", list(TURNS), ids=lambda p: p.name)
def test_real_file_has_a_step_per_thought_action_and_observation(path: Path) -> None:
    source = json.loads(path.read_text(encoding="utf-8"))
    trajectory = only_trajectory(path)

    assert len(source["trajectory"]) == TURNS[path]
    assert len(trajectory.steps) == STEPS[path]
    kinds = Counter(step.kind for step in trajectory.steps)
    assert kinds["action"] == kinds["observation"] == TURNS[path]
    assert all(s.labelable for s in trajectory.steps if s.kind in ("thought", "action"))
    assert not any(s.labelable for s in trajectory.steps if s.kind == "observation")

    actions = [s for s in trajectory.steps if s.kind == "action"]
    observations = [s for s in trajectory.steps if s.kind == "observation"]
    for number, (entry, action, observation) in enumerate(
        zip(source["trajectory"], actions, observations, strict=True)
    ):
        assert action.content == entry["action"]
        assert action.tool_name == entry["action"].split()[0]
        assert action.metadata["entry"] == observation.metadata["entry"] == number
        assert action.metadata["response"] == entry["response"]
        assert observation.content == entry["observation"]
        assert observation.metadata["state"] == entry["state"]
        assert observation.role == "tool"

    assert trajectory.external_id == path.stem
    assert trajectory.metadata["exit_status"] == "submitted"
    assert trajectory.metadata["submission"] == source["info"]["submission"]
    assert trajectory.metadata["environment"] == source["environment"]
    assert (trajectory.success, trajectory.outcome_reward) == (None, None)
    assert trajectory.raw == source
    assert trajectory.location == "record 0"


def test_real_ctf_demonstration_leaves_out_blank_thoughts() -> None:
    trajectory = only_trajectory(CTF)

    assert Counter(step.kind for step in trajectory.steps) == {
        "thought": 14,
        "action": 16,
        "observation": 16,
    }
    assert all(step.content.strip() for step in trajectory.steps if step.kind == "thought")
    assert trajectory.task.startswith("We're currently solving the following CTF challenge.")
    assert trajectory.task_key == "ctf_crypto_BabyEncryption"
    assert trajectory.metadata["submission"] == "HTB{l00k_47_y0u_r3v3rs1ng_3qu4710n5_c0ngr475}"


def test_real_task_is_the_issue_not_the_demonstration() -> None:
    trajectory = only_trajectory(TEST_REPO)

    assert trajectory.task.startswith(
        "We're currently solving the following issue within our repository."
    )
    assert "SyntaxError: invalid syntax" in trajectory.task
    assert "DEMONSTRATION" not in trajectory.task
    assert trajectory.task_key == "swe-agent__test-repo-i1"
    assert [s.tool_name for s in trajectory.steps if s.kind == "action"] == [
        "find_file",
        "open",
        "edit",
        "python",
        "submit",
    ]
    assert trajectory.metadata["model_stats"]["api_calls"] == 5


def test_real_replay_config_names_model_and_instance() -> None:
    trajectory = only_trajectory(MARSHMALLOW)

    assert trajectory.model_name == "gpt-4o"
    assert trajectory.task_key == "marshmallow-code__marshmallow-1867"
    assert (
        trajectory.external_id == "marshmallow-code__marshmallow-1867.function_calling_replace.demo"
    )
    assert "TimeDelta serialization precision" in trajectory.task
    assert only_trajectory(PYDICOM).model_name == ""


def test_predictions_file_is_not_a_trajectory() -> None:
    with pytest.raises(FileError, match=r"not a SWE-agent \.traj file"):
        list(parse(SWE_AGENT / "pydicom__pydicom-1458.all_preds.jsonl"))


def test_small_run_maps_each_turn(tmp_path: Path) -> None:
    trajectory = only_trajectory(write_run(tmp_path / "django__django-1.traj", run()))

    assert trajectory.task == "ISSUE: setup.py is broken"
    assert trajectory.task_key == "django__django-1"
    assert trajectory.steps == [
        ParsedStep(
            kind="thought",
            role="assistant",
            content="Let me look.",
            labelable=True,
            metadata={"entry": 0},
        ),
        ParsedStep(
            kind="action",
            role="assistant",
            content="find_file setup.py\n",
            labelable=True,
            tool_name="find_file",
            metadata={"entry": 0, "response": "Let me look.\n```\nfind_file setup.py\n```"},
        ),
        ParsedStep(
            kind="observation",
            role="tool",
            content="Found 1 matches",
            labelable=False,
            tool_name="find_file",
            metadata={"entry": 0, "state": '{"open_file": "n/a"}'},
        ),
        ParsedStep(
            kind="action",
            role="assistant",
            content="submit\n",
            labelable=True,
            tool_name="submit",
            metadata={"entry": 1, "response": ""},
        ),
        ParsedStep(
            kind="observation",
            role="tool",
            content="",
            labelable=False,
            tool_name="submit",
            metadata={"entry": 1},
        ),
    ]


def test_resolved_flag_gives_the_outcome(tmp_path: Path) -> None:
    info = {"exit_status": "submitted", "resolved": True}
    trajectory = only_trajectory(write_run(tmp_path / "a.traj", run(info=info)))

    assert (trajectory.success, trajectory.outcome_reward) == (True, 1.0)


def test_without_user_message_the_environment_is_the_task(tmp_path: Path) -> None:
    trajectory = only_trajectory(write_run(tmp_path / "a.traj", run(history=[])))

    assert trajectory.task == "swe_main"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"trajectory": []}, "trajectory", "is empty"),
        ({"trajectory": {"action": "ls"}}, "trajectory", "expected list, got dict"),
        ({"trajectory": ["ls"]}, "trajectory.0", "expected an object, got str"),
        ({"trajectory": [{"thought": "x"}]}, "trajectory.0.action", "is missing"),
        (
            {"trajectory": [{"action": "ls", "observation": 3}]},
            "trajectory.0.observation",
            "got int",
        ),
        ({"history": [], "environment": None}, "history", "no user message"),
        ({"history": [{"role": "user", "content": 5}]}, "history.0.content", "got int"),
        ({"info": "done"}, "info", "expected dict, got str"),
        ({"info": {"resolved": "yes"}}, "info.resolved", "expected bool"),
    ],
)
def test_malformed_run_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    [error] = list(parse(write_run(tmp_path / "a.traj", run(**change))))

    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 0", field)
    assert message in error.message


def test_not_json_or_not_an_object_is_a_file_error(tmp_path: Path) -> None:
    broken = tmp_path / "a.traj"
    broken.write_text('{"trajectory": [', encoding="utf-8")
    array = write_run(tmp_path / "b.traj", [run()])

    with pytest.raises(FileError, match=r"a\.traj: not valid JSON"):
        list(parse(broken))
    with pytest.raises(FileError, match=r"b\.traj: expected a SWE-agent trajectory object"):
        list(parse(array))


def test_real_swe_agent_1x_function_calling_run() -> None:
    # A SWE-agent 1.x .traj (function calling: tool_calls in history, replay_config)
    # reads through the same turns as the 0.x files.
    path = next((REPO_ROOT.parent / "shared" / "realdata" / "swe_agent_v1").glob("*.traj"))
    trajectory = only_trajectory(path)

    assert trajectory.external_id == "6e44b9__sweagenttestrepo-1c2844"
    assert trajectory.task_key == "SWE-agent__test-repo-i1"
    assert trajectory.model_name == "gpt-4o"
    assert trajectory.task.startswith(
        "We're currently solving the following issue within our repository."
    )
    assert Counter(step.kind for step in trajectory.steps) == {
        "thought": 5,
        "action": 5,
        "observation": 5,
    }
    assert [s.tool_name for s in trajectory.steps if s.kind == "action"] == [
        "find_file",
        "open",
        "edit",
        "python3",
        "submit",
    ]
    assert [s.labelable for s in trajectory.steps] == [True, True, False] * 5
    assert trajectory.metadata["exit_status"] == "submitted"
    assert trajectory.metadata["model_stats"]["api_calls"] == 5
    assert trajectory.steps[-1].content.lstrip().startswith("diff --git a/tests/missing_colon.py")
