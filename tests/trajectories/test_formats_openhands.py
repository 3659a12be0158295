"""The OpenHands parser on the real V0 trajectories and V1 agent-SDK conversation, and on
bad input."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import import_units, parser_for
from trajectories.formats.base import FileError, RecordError
from trajectories.formats.openhands import parse

OPENHANDS = REALDATA / "openhands"
V1 = OPENHANDS / "v1_sdk_conversation" / "cd94562403b9487ebdd4018e3f531dfd"
# trajectories, steps, labelable steps, roots, deepest step, tool calls. User messages
# and system prompts are roots; the agent's actions hang below the user's message of
# their turn and observations below their action, so a conversation with tools is two
# deep. An earlier parser left the agent's actions (which name no cause) as roots too:
# basic.json had 3 roots and depth 1.
SHAPES: dict[Path, tuple[int, int, int, int, int, dict[str, int]]] = {
    OPENHANDS / "basic.json": (1, 4, 2, 1, 2, {"str_replace_editor": 1}),
    OPENHANDS / "basic_gui_mode.json": (
        1,
        10,
        5,
        1,
        2,
        {"execute_bash": 2, "str_replace_editor": 2},
    ),
    OPENHANDS / "basic_interactions.json": (1, 6, 3, 3, 1, {}),
    OPENHANDS / "wrong_initial_state.json": (
        1,
        8,
        4,
        1,
        2,
        {"str_replace_editor": 2, "execute_bash": 1},
    ),
    V1: (1, 8, 3, 3, 2, {"terminal": 1}),
}


def test_registered_under_its_format_name() -> None:
    assert parser_for("openhands") is parse


@pytest.mark.parametrize("path", list(SHAPES), ids=lambda path: path.name)
def test_real_file_shape(path: Path) -> None:
    assert shape(trajectories(parse(path))) == SHAPES[path]


@pytest.mark.parametrize("path", list(SHAPES), ids=lambda path: path.name)
def test_inputs_are_roots_and_the_agents_steps_are_labelable(path: Path) -> None:
    [trajectory] = trajectories(parse(path))
    steps = trajectory.steps
    for step in steps:
        assert step.labelable == (step.role == "assistant")
        if step.role in ("user", "system"):
            assert "parent" not in step.metadata
        elif step.role == "tool":
            action = steps[step.metadata["parent"]]
            assert action.role == "assistant" and action.tool_name == step.tool_name
        else:
            assert steps[step.metadata["parent"]].role == "user"


def test_v0_trajectory_fields_tools_and_tokens() -> None:
    [trajectory] = trajectories(parse(OPENHANDS / "basic.json"))
    assert trajectory.external_id == "basic"
    assert trajectory.task.startswith("Please create a simple 2048 game. No need to run it.")
    assert trajectory.model_name == "claude-3-5-sonnet-20241022"
    assert trajectory.metadata == {"version": "v0", "events": 4}
    assert trajectory.location == "record 0"
    prompt, edit, result, finish = trajectory.steps
    assert (prompt.kind, prompt.role, prompt.labelable) == ("message", "user", False)
    assert (edit.kind, edit.tool_name, edit.labelable) == ("tool_call", "str_replace_editor", True)
    assert edit.tool_args["path"] == "/workspace/game_2048.py"
    assert edit.content.startswith("I'll help you create a simple 2048 game in Python.")
    assert edit.metadata["tokens"] == {
        "prompt_tokens": 3486,
        "completion_tokens": 1135,
        "total_tokens": 4621,
    }
    assert edit.metadata["tool_call_id"] == result.metadata["tool_call_id"]
    assert (result.kind, result.labelable, result.metadata["parent"]) == ("tool_result", False, 1)
    assert result.content.startswith("--- /workspace/game_2048.py")
    # The observation repeats its action's model response; its usage is counted once.
    assert "tokens" not in result.metadata
    assert (finish.kind, finish.tool_name, finish.labelable) == ("answer", "finish", True)


def test_v0_state_events_make_no_step() -> None:
    raw = json.loads((OPENHANDS / "basic_gui_mode.json").read_text(encoding="utf-8"))
    assert len(raw) == 18
    [trajectory] = trajectories(parse(OPENHANDS / "basic_gui_mode.json"))
    kept = {step.metadata["event_id"] for step in trajectory.steps}
    assert kept == {"4", "7", "8", "9", "10", "11", "12", "13", "14", "15"}
    assert trajectory.task.startswith("I want to create a VueJS app")


def test_v0_three_turns_each_answered_under_its_message() -> None:
    [trajectory] = trajectories(parse(OPENHANDS / "basic_interactions.json"))
    assert [(step.role, step.metadata.get("parent")) for step in trajectory.steps] == [
        ("user", None),
        ("assistant", 0),
        ("user", None),
        ("assistant", 2),
        ("user", None),
        ("assistant", 4),
    ]
    assert trajectory.task == "what's 1+1?"
    assert trajectory.model_name == "gpt-4o-2024-08-06"


@pytest.mark.parametrize("where", [V1, V1 / "base_state.json"], ids=["folder", "base_state"])
def test_v1_conversation_from_its_folder_or_base_state(where: Path) -> None:
    [trajectory] = trajectories(parse(where))
    assert trajectory.external_id == "cd945624-03b9-487e-bdd4-018e3f531dfd"
    assert trajectory.model_name == "openai/gpt-4o-mini"
    assert trajectory.task.startswith("Use the terminal tool to run `pwd`")
    assert trajectory.metadata == {"version": "v1", "events": 8}
    kinds = [(step.kind, step.role, step.tool_name) for step in trajectory.steps]
    assert kinds == [
        ("message", "system", ""),
        ("message", "user", ""),
        ("tool_call", "assistant", "terminal"),
        ("tool_result", "tool", "terminal"),
        ("answer", "assistant", "finish"),
        ("tool_result", "tool", "finish"),
        ("message", "user", ""),
        ("message", "assistant", ""),
    ]
    terminal = trajectory.steps[2]
    assert terminal.tool_args["command"] == "pwd > tool_output.txt"
    assert terminal.metadata["tool_call_id"] == "call_KaQ0kUcBb5tbMzhxbIx9dvoZ"


def test_v1_event_file_alone_is_a_file_error_naming_its_conversation() -> None:
    # An event file is not an import of its own: it says which folder to import instead
    # of making an empty import.
    first = sorted((V1 / "events").glob("event-*.json"))[0]
    with pytest.raises(
        FileError, match=re.escape(f"one event of the OpenHands conversation in {V1}")
    ):
        list(parse(first))


def test_a_folder_imports_each_conversation_once_and_each_v0_file() -> None:
    assert import_units("openhands", OPENHANDS) == [
        OPENHANDS / "basic.json",
        OPENHANDS / "basic_gui_mode.json",
        OPENHANDS / "basic_interactions.json",
        V1,
        OPENHANDS / "wrong_initial_state.json",
    ]
    assert import_units("openhands", V1) == [V1]
    assert import_units("openhands", V1.parent) == [V1]
    # Another format reads a folder file by file, as before.
    assert len(import_units("otel", OPENHANDS)) == 4 + 1 + 8


def test_v0_event_without_source_names_record_and_field(tmp_path: Path) -> None:
    events = json.loads((OPENHANDS / "basic.json").read_text(encoding="utf-8"))
    del events[1]["source"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events, indent=1), encoding="utf-8")
    errors = [result for result in parse(path) if isinstance(result, RecordError)]
    assert errors == [RecordError("record 1", "source", "is missing")]


def test_v0_event_with_neither_action_nor_observation(tmp_path: Path) -> None:
    events = json.loads((OPENHANDS / "basic.json").read_text(encoding="utf-8"))
    del events[3]["action"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events), encoding="utf-8")
    errors = [result for result in parse(path) if isinstance(result, RecordError)]
    assert errors == [
        RecordError("record 3", "action", "is missing; an event has an action or an observation")
    ]


def test_v1_bad_event_file_names_the_file_and_field(tmp_path: Path) -> None:
    folder = shutil.copytree(V1, tmp_path / "conversation")
    action = sorted((folder / "events").glob("event-00002-*.json"))[0]
    event = json.loads(action.read_text(encoding="utf-8"))
    del event["tool_name"]
    action.write_text(json.dumps(event), encoding="utf-8")
    broken = sorted((folder / "events").glob("event-00006-*.json"))[0]
    broken.write_text("{not json", encoding="utf-8")
    errors = [result for result in parse(folder) if isinstance(result, RecordError)]
    assert [(error.location, error.field) for error in errors] == [
        (f"events/{action.name}", "tool_name"),
        (f"events/{broken.name}", ""),
    ]
    assert errors[0].message == "is missing"


def test_v1_folder_without_events_is_a_file_error(tmp_path: Path) -> None:
    folder = tmp_path / "conversation"
    folder.mkdir()
    shutil.copy(V1 / "base_state.json", folder)
    with pytest.raises(FileError, match="no events/ folder"):
        list(parse(folder))


def test_empty_event_list_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("[]", encoding="utf-8")
    assert list(parse(path)) == [
        RecordError("record 0", "", "the trajectory has no event to make a step of")
    ]
