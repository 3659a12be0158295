"""The agent-session parser on real Claude Code, Codex CLI and Pi session logs, and on
bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trajectories.trace_shapes import REALDATA, shape, trajectories
from trajectories.formats import parser_for
from trajectories.formats.agent_session import parse
from trajectories.formats.base import FileError, ParsedStep, RecordError

CLAUDE = REALDATA / "claude_code"
CODEX_077 = (
    REALDATA / "codex" / "rollout-2026-01-02T18-39-45-019b7f94-51b4-7593-922e-ba12b5b73b52.jsonl"
)
CODEX_0125 = (
    REALDATA / "codex" / "rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl"
)
PI = REALDATA / "pi_agent" / "large-session.jsonl"
# trajectories, steps, labelable steps, roots, deepest step, tool calls. A user's message
# is a root, the model's steps hang below the prompt of their turn, a tool result below
# its call and a subagent's steps below its Task call; so Claude Code sessions are two
# deep (prompt, call, result) and three with a subagent's tool results. An earlier
# parser followed parentUuid, which threads every line to the line before it, and made
# the subagent session one chain 40 deep with a single root.
SHAPES: dict[Path, tuple[int, int, int, int, int, dict[str, int]]] = {
    CLAUDE / "short.jsonl": (1, 8, 4, 2, 2, {"Bash": 1, "Glob": 1}),
    CLAUDE / "subagent.jsonl": (
        1,
        66,
        36,
        4,
        3,
        {
            "WebFetch": 1,
            "WebSearch": 5,
            "Glob": 1,
            "Read": 6,
            "AskUserQuestion": 1,
            "Task": 1,
            "Bash": 8,
            "Write": 1,
            "ExitPlanMode": 1,
        },
    ),
    CLAUDE / "tool_heavy.jsonl": (
        1,
        21,
        8,
        7,
        2,
        {"Bash": 2, "WebSearch": 1, "Glob": 1, "Read": 1, "WebFetch": 1},
    ),
    CODEX_077: (1, 10, 4, 3, 2, {"shell": 3}),
    CODEX_0125: (
        1,
        224,
        118,
        4,
        2,
        {
            "exec_command": 43,
            "write_stdin": 54,
            "web_search": 3,
            "update_plan": 2,
            "apply_patch": 3,
        },
    ),
    PI: (1, 1097, 636, 88, 2, {"read": 50, "bash": 192, "edit": 146, "write": 3}),
}


def parent(steps: list[ParsedStep], step: ParsedStep) -> ParsedStep | None:
    index = step.metadata.get("parent")
    return None if index is None else steps[index]


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def read_lines(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_registered_under_its_format_name() -> None:
    assert parser_for("agent-session") is parse


@pytest.mark.parametrize("path", list(SHAPES), ids=lambda path: path.name[:40])
def test_real_file_shape(path: Path) -> None:
    assert shape(trajectories(parse(path))) == SHAPES[path]


@pytest.mark.parametrize("path", list(SHAPES), ids=lambda path: path.name[:40])
def test_the_tree_follows_turns_and_calls(path: Path) -> None:
    [trajectory] = trajectories(parse(path))
    steps = trajectory.steps
    for step in steps:
        above = parent(steps, step)
        if step.role == "user" and not step.agent:
            assert above is None, "a user's message starts a turn"
        elif step.kind == "tool_result" and above is not None and above.kind == "tool_call":
            assert above.metadata.get("tool_call_id") == step.metadata["tool_call_id"]
            assert above.tool_name == step.tool_name
        elif step.role == "assistant" and not step.agent:
            assert above is not None and above.role == "user", step


def test_what_is_labelable_is_the_models_output() -> None:
    for path in SHAPES:
        [trajectory] = trajectories(parse(path))
        for step in trajectory.steps:
            assert step.labelable == (step.role == "assistant"), (path.name, step)
            if step.labelable:
                assert step.kind in ("message", "thought", "tool_call")
            else:
                # The user's (or developer's) messages and the tools' results.
                assert step.kind in ("message", "tool_result")


def test_claude_code_session_fields() -> None:
    [trajectory] = trajectories(parse(CLAUDE / "short.jsonl"))
    assert trajectory.external_id == "55604662-cf2a-4331-851a-ec234028f8ca"
    assert trajectory.task == "mix phx.server doesnt seem to start"
    assert trajectory.model_name == "claude-opus-4-6"
    assert trajectory.location == "line 1"
    assert trajectory.metadata == {
        "source": "claude-code",
        "session_id": "55604662-cf2a-4331-851a-ec234028f8ca",
        "version": "2.1.38",
        "cwd": "/home/marco/projects/spotter",
        "gitBranch": "master",
        "tokens": {"input": 3, "output": 13, "cache_read": 11515, "cache_write": 13835},
    }
    kinds = [(step.kind, step.role, step.tool_name) for step in trajectory.steps]
    assert kinds == [
        ("message", "user", ""),
        ("thought", "assistant", ""),
        ("message", "assistant", ""),
        ("tool_call", "assistant", "Bash"),
        ("tool_call", "assistant", "Glob"),
        ("tool_result", "tool", "Bash"),
        ("tool_result", "tool", "Glob"),
        ("message", "user", ""),
    ]
    assert [step.metadata.get("parent") for step in trajectory.steps] == [
        None,
        0,
        0,
        0,
        0,
        3,
        4,
        None,
    ]
    bash = trajectory.steps[3]
    assert isinstance(bash.tool_args, dict) and "command" in bash.tool_args
    # The user refused both calls; the results say so and carry the error flag.
    assert all(step.metadata["is_error"] for step in trajectory.steps[5:7])
    # The line a message followed in Claude Code's own thread is kept: for the thinking,
    # the blank text line after the prompt, which made no step.
    assert trajectory.steps[1].metadata["thread_parent"] == "1b7d717f-d6a2-46a6-8575-fa4f937450ea"


def test_claude_code_subagent_hangs_below_its_task_call() -> None:
    [trajectory] = trajectories(parse(CLAUDE / "subagent.jsonl"))
    steps = trajectory.steps
    [task] = [
        i for i, step in enumerate(steps) if step.kind == "tool_call" and step.tool_name == "Task"
    ]
    assert steps[task].agent == ""
    subagent = [step for step in steps if step.agent]
    assert {step.agent for step in subagent} == {"afb92ff"}
    assert len(subagent) == 19
    assert subagent[0].role == "user" and subagent[0].content.startswith("Draft bead content")
    for step in subagent:
        if step.kind == "tool_result":
            assert parent(steps, step) in subagent
        else:
            assert step.metadata["parent"] == task
    # The subagent ran on another model than the main thread.
    models = {step.metadata["model"] for step in subagent if "model" in step.metadata}
    assert models == {"claude-haiku-4-5-20251001"}
    assert trajectory.model_name == "claude-opus-4-6"
    [result] = [step for step in steps if step.kind == "tool_result" and step.tool_name == "Task"]
    assert result.metadata["parent"] == task and not result.agent


def test_codex_session_fields() -> None:
    [trajectory] = trajectories(parse(CODEX_077))
    assert trajectory.external_id == "019b7f94-51b4-7593-922e-ba12b5b73b52"
    assert trajectory.task == (
        "what is current repository about? summarize purpuse and explain goals"
    )
    assert trajectory.model_name == "gpt-5-1-codex-2025-11-13"
    assert trajectory.metadata["source"] == "codex"
    assert trajectory.metadata["cli_version"] == "0.77.0"
    assert trajectory.metadata["originator"] == "codex_exec"
    assert trajectory.metadata["tokens"]["total_tokens"] == 22774
    [thought] = [step for step in trajectory.steps if step.kind == "thought"]
    assert thought.content.startswith("**Clarifying documentation instructions**")
    first_call = trajectory.steps[3]
    assert (first_call.kind, first_call.tool_name, first_call.labelable) == (
        "tool_call",
        "shell",
        True,
    )
    assert first_call.metadata["parent"] == 2 and "tokens" in first_call.metadata
    result = trajectory.steps[4]
    assert result.metadata["parent"] == 3
    assert result.content.startswith("_bmad\n")


def test_codex_two_turns_each_under_its_prompt() -> None:
    [trajectory] = trajectories(parse(CODEX_0125))
    assert trajectory.task == "show tools"
    assert trajectory.model_name == "gpt-5.5"
    assert trajectory.metadata["turns"] == 2
    prompts = [i for i, step in enumerate(trajectory.steps) if step.role == "user"]
    last_prompt = trajectory.steps[prompts[-1]]
    assert last_prompt.content.startswith("let's update the defailt context")
    after = trajectory.steps[prompts[-1] + 1 :]
    assert all(
        step.metadata["parent"] == prompts[-1] for step in after if step.kind != "tool_result"
    )
    # A custom tool (apply_patch) is read as a call, its output as its result.
    patches = [step for step in trajectory.steps if step.tool_name == "apply_patch"]
    assert [step.kind for step in patches].count("tool_result") == 3


def test_pi_session_fields_tokens_and_cost() -> None:
    [trajectory] = trajectories(parse(PI))
    assert trajectory.external_id == "d703a1a9-1b7b-4fb1-b512-c9738b1fe617"
    assert trajectory.task == "/mode"
    assert trajectory.model_name == "claude-sonnet-4-5"
    assert trajectory.metadata["source"] == "pi"
    assert trajectory.metadata["provider"] == "anthropic"
    assert trajectory.metadata["tokens"] == {
        "input": 1049,
        "output": 83156,
        "cacheRead": 43229469,
        "cacheWrite": 4296232,
    }
    assert trajectory.metadata["cost"] == pytest.approx(30.3301977)
    errors = [step for step in trajectory.steps if step.metadata.get("is_error")]
    assert len(errors) == 19 and all(step.kind == "tool_result" for step in errors)
    assert sum(step.role == "user" for step in trajectory.steps) == 88


def test_claude_code_unknown_content_block_names_line_and_field(tmp_path: Path) -> None:
    lines = read_lines(CLAUDE / "short.jsonl")
    assert lines[7]["message"]["content"][0]["name"] == "Bash"
    lines[7]["message"]["content"][0]["type"] = "video"
    results = list(parse(write_lines(tmp_path / "s.jsonl", lines)))
    errors = [result for result in results if isinstance(result, RecordError)]
    assert errors == [
        RecordError(
            "line 8",
            "message.content.0.type",
            "is 'video'; not a content block this format has",
        )
    ]


def test_codex_output_without_call_id_names_line_and_field(tmp_path: Path) -> None:
    lines = read_lines(CODEX_077)
    number = next(
        n
        for n, line in enumerate(lines)
        if line["type"] == "response_item" and line["payload"]["type"] == "function_call_output"
    )
    del lines[number]["payload"]["call_id"]
    results = list(parse(write_lines(tmp_path / "rollout.jsonl", lines)))
    errors = [result for result in results if isinstance(result, RecordError)]
    assert errors == [RecordError(f"line {number + 1}", "payload.call_id", "is missing")]


def test_pi_message_with_an_unknown_role_names_line_and_field(tmp_path: Path) -> None:
    lines = read_lines(PI)[:6]
    number = next(n for n, line in enumerate(lines) if line["type"] == "message")
    lines[number]["message"]["role"] = "narrator"
    results = list(parse(write_lines(tmp_path / "pi.jsonl", lines)))
    errors = [result for result in results if isinstance(result, RecordError)]
    assert errors == [
        RecordError(
            f"line {number + 1}",
            "message.role",
            "is 'narrator'; expected user, assistant or toolResult",
        )
    ]


def test_broken_line_is_reported_and_the_rest_still_read(tmp_path: Path) -> None:
    text = (CLAUDE / "short.jsonl").read_text(encoding="utf-8").splitlines()
    assert "Let me check the project structure" in text[6]
    text[6] = text[6][:20]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    results = list(parse(path))
    [error] = [result for result in results if isinstance(result, RecordError)]
    assert error.location == "line 7"
    [trajectory] = trajectories(result for result in results if result is not error)
    assert len(trajectory.steps) == 7


def test_session_without_messages_is_an_error(tmp_path: Path) -> None:
    lines = read_lines(CLAUDE / "short.jsonl")[:3]
    assert list(parse(write_lines(tmp_path / "s.jsonl", lines))) == [
        RecordError("line 1", "", "the session has no message to make a step of")
    ]


def test_empty_file_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(FileError, match="is empty"):
        list(parse(path))


def test_pi_entries_linked_by_parent_id_keep_the_turn_tree(tmp_path: Path) -> None:
    # Newer Pi sessions thread each entry to the one before it by parentId; the tree
    # still follows turns and calls, and the thread is kept as thread_parent.
    lines = read_lines(PI)[:12]
    previous = ""
    for number, line in enumerate(lines):
        line["id"], line["parentId"] = f"e{number}", previous
        previous = line["id"]
    [linked] = trajectories(parse(write_lines(tmp_path / "linked.jsonl", lines)))
    [plain] = trajectories(parse(write_lines(tmp_path / "plain.jsonl", read_lines(PI)[:12])))
    assert [s.metadata.get("parent") for s in linked.steps] == [
        s.metadata.get("parent") for s in plain.steps
    ]
    assert linked.steps[1].metadata["thread_parent"].startswith("e")
