"""The OpenAI-messages parser on tau-bench's real airline runs, and on the other file
shapes it accepts (``messages``, a single object, JSON Lines)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedStep, ParsedTrajectory, RecordError
from trajectories.formats.openai_messages import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
TAU_AIRLINE = REPO_ROOT.parent / "shared" / "realdata" / "tau_bench" / "gpt-4o-airline.json"


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def run(**change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "task_id": 3,
        "trial": 1,
        "reward": 1.0,
        "info": {"task": {"instruction": "You are Ann. Cancel reservation X1."}, "source": "user"},
        "traj": [
            {"role": "system", "content": "You are an airline agent."},
            {"role": "user", "content": "Please cancel X1."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("cancel_reservation", '{"reservation_id": "X1"}')],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "name": "cancel_reservation",
                "content": "ok",
            },
            {"role": "assistant", "content": "Done."},
        ],
    }
    record.update(change)
    return record


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def only_trajectory(path: Path) -> ParsedTrajectory:
    [result] = list(parse(path))
    assert isinstance(result, ParsedTrajectory), result
    return result


@pytest.fixture(scope="module")
def airline() -> list[ParsedTrajectory]:
    results = list(parse(TAU_AIRLINE))
    assert [r for r in results if isinstance(r, RecordError)] == []
    return [r for r in results if isinstance(r, ParsedTrajectory)]


def test_registered_under_its_format_name() -> None:
    assert parser_for("openai-messages") is parse


def test_real_file_counts(airline: list[ParsedTrajectory]) -> None:
    steps = [step for trajectory in airline for step in trajectory.steps]

    assert len(airline) == 200
    assert sum(1 for t in airline if t.outcome_reward == 1.0) == 84
    assert sum(1 for t in airline if t.success) == 84
    assert sum(1 for t in airline if t.success is False) == 116
    assert len(steps) == 5308
    assert Counter(step.role for step in steps) == {
        "system": 200,
        "user": 1490,
        "assistant": 2454,
        "tool": 1164,
    }
    assert all(step.labelable for step in steps if step.role == "assistant")
    assert not any(step.labelable for step in steps if step.role != "assistant")
    assert Counter(step.kind for step in steps) == {
        "message": 200 + 1490 + 2454 - 1164,
        "tool_call": 1164,
        "tool_result": 1164,
    }


def test_real_file_identity_task_and_metadata(airline: list[ParsedTrajectory]) -> None:
    source = json.loads(TAU_AIRLINE.read_text(encoding="utf-8"))
    assert len({t.external_id for t in airline}) == 200
    assert len({t.task_key for t in airline}) == 50
    for trajectory, record in zip(airline, source, strict=True):
        assert trajectory.external_id == f"{record['task_id']}:{record['trial']}"
        assert trajectory.task_key == str(record["task_id"])
        assert trajectory.task == record["info"]["task"]["instruction"]
        assert trajectory.metadata == {
            "task_id": record["task_id"],
            "trial": record["trial"],
            "info": record["info"],
        }
        assert trajectory.raw == record
        assert [step.content for step in trajectory.steps] == [
            message["content"] or "" for message in record["traj"]
        ]


def test_real_file_tool_calls_and_results_are_linked(airline: list[ParsedTrajectory]) -> None:
    for trajectory in airline:
        calls = {}
        for step in trajectory.steps:
            if step.kind == "tool_call":
                [made] = step.metadata["tool_calls"]
                assert step.tool_name == made["name"]
                assert isinstance(step.tool_args, dict)
                assert "tool_args_error" not in step.metadata
                calls[made["id"]] = made["name"]
            elif step.kind == "tool_result":
                assert step.tool_name == calls[step.metadata["tool_call_id"]]


def test_run_maps_each_message_to_a_step(tmp_path: Path) -> None:
    trajectory = only_trajectory(write_json(tmp_path / "runs.json", [run()]))

    assert trajectory.external_id == "3:1"
    assert trajectory.task_key == "3"
    assert trajectory.task == "You are Ann. Cancel reservation X1."
    assert (trajectory.outcome_reward, trajectory.success) == (1.0, True)
    assert trajectory.location == "record 0"
    assert trajectory.labels == []
    assert trajectory.steps == [
        ParsedStep(
            kind="message", role="system", content="You are an airline agent.", labelable=False
        ),
        ParsedStep(kind="message", role="user", content="Please cancel X1.", labelable=False),
        ParsedStep(
            kind="tool_call",
            role="assistant",
            content="",
            labelable=True,
            tool_name="cancel_reservation",
            tool_args={"reservation_id": "X1"},
            metadata={
                "tool_calls": [
                    {
                        "id": "call_1",
                        "name": "cancel_reservation",
                        "arguments": {"reservation_id": "X1"},
                    }
                ]
            },
        ),
        ParsedStep(
            kind="tool_result",
            role="tool",
            content="ok",
            labelable=False,
            tool_name="cancel_reservation",
            metadata={"tool_call_id": "call_1"},
        ),
        ParsedStep(kind="message", role="assistant", content="Done.", labelable=True),
    ]


def test_arguments_that_are_not_json_are_kept_not_fatal(tmp_path: Path) -> None:
    messages = run()["traj"]
    messages[2]["tool_calls"] = [call("search", '{"query": "SFO', "call_9")]
    trajectory = only_trajectory(write_json(tmp_path / "runs.json", [run(traj=messages)]))

    step = trajectory.steps[2]
    assert step.kind == "tool_call"
    assert step.labelable
    assert step.tool_name == "search"
    assert step.tool_args == '{"query": "SFO'
    assert step.metadata["tool_args_error"].startswith(
        "arguments are not JSON: Unterminated string"
    )
    assert step.metadata["tool_calls"] == [
        {"id": "call_9", "name": "search", "arguments": '{"query": "SFO'}
    ]


def test_several_calls_join_names_and_list_arguments(tmp_path: Path) -> None:
    messages = run()["traj"]
    messages[2]["content"] = "Checking both."
    messages[2]["tool_calls"] = [
        call("get_user", '{"id": "ann"}', "call_a"),
        call("get_flight", "not json", "call_b"),
    ]
    messages[3:4] = [
        {"role": "tool", "tool_call_id": "call_a", "content": "user"},
        {"role": "tool", "tool_call_id": "call_b", "content": "flight"},
    ]
    trajectory = only_trajectory(write_json(tmp_path / "runs.json", [run(traj=messages)]))

    step = trajectory.steps[2]
    assert step.content == "Checking both."
    assert step.tool_name == "get_user, get_flight"
    assert step.tool_args == [
        {"id": "call_a", "name": "get_user", "arguments": {"id": "ann"}},
        {"id": "call_b", "name": "get_flight", "arguments": "not json"},
    ]
    assert step.metadata["tool_args_error"].startswith(
        "call 1 (get_flight): arguments are not JSON"
    )
    # Tool results without a name take it from the call they answer.
    assert [s.tool_name for s in trajectory.steps[3:5]] == ["get_user", "get_flight"]


def test_content_parts_are_joined_and_non_text_parts_noted(tmp_path: Path) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "Be brief."},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    ]
    trajectory = only_trajectory(write_json(tmp_path / "run.json", {"messages": messages}))

    assert trajectory.task == "What is in this picture?\nBe brief."
    assert trajectory.steps[0].content == "What is in this picture?\nBe brief."
    assert trajectory.steps[0].metadata == {"non_text_parts": ["image_url"]}
    assert trajectory.steps[1].content == "A cat."


def test_single_object_with_messages_falls_back_to_first_user_message(tmp_path: Path) -> None:
    record = {
        "id": "chat-1",
        "messages": [
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"},
        ],
    }
    trajectory = only_trajectory(write_json(tmp_path / "run.json", record))

    assert trajectory.external_id == "chat-1"
    assert trajectory.task == "Hi there"
    assert trajectory.task_key == ""
    assert (trajectory.outcome_reward, trajectory.success) == (None, None)
    assert trajectory.metadata == {"id": "chat-1"}
    assert [step.labelable for step in trajectory.steps] == [False, False, True]


def test_json_lines_are_read_line_by_line(tmp_path: Path) -> None:
    chat = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    path = tmp_path / "runs.jsonl"
    lines = [json.dumps({**chat, "reward": 0}), "", "{not json", json.dumps(chat)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    results = list(parse(path))

    first, error, last = results
    assert isinstance(first, ParsedTrajectory)
    assert (first.location, first.external_id, first.success) == ("line 1", "0", False)
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("line 3", "")
    assert "not valid JSON" in error.message
    assert isinstance(last, ParsedTrajectory)
    # Without task_id/trial or id, a run is named by its position among the runs.
    assert (last.location, last.external_id) == ("line 4", "2")


def test_tool_call_without_function_name_is_reported_and_others_parse(tmp_path: Path) -> None:
    messages = run()["traj"]
    del messages[2]["tool_calls"][0]["function"]["name"]
    path = write_json(
        tmp_path / "runs.json", [run(trial=0), run(trial=1, traj=messages), run(trial=2)]
    )

    results = list(parse(path))

    assert results[1] == RecordError("record 1", "traj.2.tool_calls.0.function.name", "is missing")
    assert [r.external_id for r in results if isinstance(r, ParsedTrajectory)] == ["3:0", "3:2"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"traj": "hello"}, "traj", "expected list, got str"),
        ({"traj": []}, "traj", "is empty"),
        ({"traj": [{"content": "x"}]}, "traj.0.role", "is missing"),
        ({"traj": [{"role": "critic", "content": "x"}]}, "traj.0.role", "is 'critic'"),
        ({"traj": [{"role": "user", "content": 5}]}, "traj.0.content", "expected str, a list"),
        ({"traj": ["hi"]}, "traj.0", "expected a message object"),
        (
            {"traj": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]},
            "traj.0.tool_calls.0.function",
            "is missing",
        ),
        (
            {"info": {}, "traj": [{"role": "assistant", "content": "x"}]},
            "traj",
            "has no user message",
        ),
        ({"reward": "1"}, "reward", "expected int or float"),
    ],
)
def test_malformed_run_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = write_json(tmp_path / "runs.json", [run(trial=0), run(**change), run(trial=2)])

    results = list(parse(path))

    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 1", field)
    assert message in error.message
    assert all(isinstance(r, ParsedTrajectory) for r in (results[0], results[2]))


def test_run_without_messages_is_reported(tmp_path: Path) -> None:
    path = write_json(tmp_path / "runs.json", [{"task_id": 1, "trial": 0}])

    [error] = list(parse(path))

    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 0", "traj")


def test_not_json_file_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.txt"
    path.write_text("task_id,reward\n1,0\n", encoding="utf-8")

    with pytest.raises(FileError, match=r"runs\.txt: expected a JSON array"):
        list(parse(path))


def test_broken_array_is_a_file_error_with_position(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text('[\n  {"task_id": 1,\n   "traj": [}\n]\n', encoding="utf-8")

    with pytest.raises(
        FileError, match=r"runs\.json: not valid JSON at record 0: .* \(line 3, column 13\)"
    ):
        list(parse(path))


def test_broken_pretty_printed_object_reports_the_real_position(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(
        '{\n  "messages": [\n    {"role": "user" "content": "hi"}\n  ]\n}\n', encoding="utf-8"
    )

    with pytest.raises(FileError, match=r"run\.json: not valid JSON: .* \(line 3, column 21\)"):
        list(parse(path))


def test_empty_file_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text("  \n", encoding="utf-8")

    with pytest.raises(FileError, match=r"runs\.json: is empty"):
        list(parse(path))
