"""The agent-trace formats through `import_trajectories` into PostgreSQL: what is stored,
and the step tree kept on each step's metadata."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from tests.conftest import REALDATA
from tests.trajectories.test_formats_langsmith import TREE
from tests.trajectories.test_formats_otel import AGENT_TRACE, otlp
from trajectories.models import Step, Trajectory

pytestmark = pytest.mark.django_db


def run_import(source_format: str, *paths: Path) -> tuple[dict[str, Any], str]:
    out, err = StringIO(), StringIO()
    call_command(
        "import_trajectories",
        "--project",
        "traces",
        "--create",
        "--format",
        source_format,
        *map(str, paths),
        stdout=out,
        stderr=err,
    )
    return json.loads(out.getvalue().strip().splitlines()[-1]), err.getvalue()


def stored_steps(external_id: str) -> list[Step]:
    trajectory = Trajectory.objects.get(project__slug="traces", external_id=external_id)
    return list(trajectory.steps.order_by("index"))


def test_otel_spans_are_stored_with_their_tree(tmp_path: Path) -> None:
    agent_trace = tmp_path / "agent.json"
    agent_trace.write_text(json.dumps(otlp(AGENT_TRACE)), encoding="utf-8")
    summary, err = run_import(
        "otel", REALDATA / "otel_openinference" / "all-spans.json", agent_trace
    )
    assert (summary["created"], summary["steps"], summary["rejected"]) == (11, 13, 0), err
    assert Trajectory.objects.filter(source_format="otel").count() == 11
    agent, call, result = stored_steps("t1")
    assert "parent" not in agent.metadata
    assert (call.metadata["parent"], result.metadata["parent"]) == (0, 0)
    assert (call.agent, call.metadata["span_id"], call.tool_name) == ("planner", "b", "get_weather")
    assert (call.labelable, result.labelable) == (True, False)


def test_langfuse_trace_is_stored_with_agents_and_parents() -> None:
    summary, err = run_import(
        "langfuse", REALDATA / "langfuse" / "openai-agents-2025-09-30.trace.json"
    )
    assert (summary["created"], summary["steps"]) == (1, 5), err
    steps = stored_steps("fee618f96dc31e0ca38b2f7b26eb8b29")
    assert [step.metadata.get("parent") for step in steps] == [None, 0, 1, 1, 1]
    assert [step.agent for step in steps] == ["Agent workflow"] + ["Hello world"] * 4
    assert (steps[2].kind, steps[2].tool_name) == ("tool_call", "get_weather")


def test_langsmith_runs_are_stored_with_their_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps(TREE), encoding="utf-8")
    summary, err = run_import(
        "langsmith", REALDATA / "langsmith" / "langsmith_py_wrap_openai_.json", tree
    )
    assert (summary["created"], summary["steps"]) == (2, 4), err
    chain, llm, tool = stored_steps("r1")
    assert "parent" not in chain.metadata
    assert llm.metadata["parent"] == tool.metadata["parent"] == 0
    assert (llm.metadata["parent_span_id"], llm.metadata["tokens"]) == (
        "r1",
        {"input": 10, "output": 4},
    )
    assert tool.content == "42" and not tool.labelable


def test_claude_code_subagent_session_is_stored_below_its_task_call() -> None:
    summary, err = run_import("agent-session", REALDATA / "claude_code" / "subagent.jsonl")
    assert (summary["created"], summary["steps"], summary["rejected"]) == (1, 66, 0), err
    trajectory = Trajectory.objects.get(external_id="491e126e-1e71-469c-ade2-fcc8af567c74")
    assert (trajectory.step_count, trajectory.model_name) == (66, "claude-opus-4-6")
    assert trajectory.metadata["source"] == "claude-code"
    steps = stored_steps(trajectory.external_id)
    [task] = [s.index for s in steps if s.kind == "tool_call" and s.tool_name == "Task"]
    subagent = [step for step in steps if step.agent == "afb92ff"]
    assert len(subagent) == 19
    assert all(step.metadata["parent"] == task for step in subagent if step.kind != "tool_result")
    assert sum(step.labelable for step in steps) == 36


def test_openhands_v1_folder_is_one_conversation() -> None:
    folder = REALDATA / "openhands" / "v1_sdk_conversation" / "cd94562403b9487ebdd4018e3f531dfd"
    summary, err = run_import("openhands", folder)
    assert (summary["created"], summary["steps"], summary["rejected"]) == (1, 8, 0), err
    assert Trajectory.objects.filter(source_format="openhands").count() == 1
    steps = stored_steps("cd945624-03b9-487e-bdd4-018e3f531dfd")
    assert [step.metadata.get("parent") for step in steps] == [None, None, 1, 2, 1, 4, None, 6]
    assert (steps[2].kind, steps[2].tool_name, steps[2].labelable) == (
        "tool_call",
        "terminal",
        True,
    )
    assert steps[3].metadata["parent_span_id"] == steps[2].metadata["event_id"]


def test_openhands_v0_trajectory_is_stored() -> None:
    summary, err = run_import("openhands", REALDATA / "openhands" / "wrong_initial_state.json")
    assert (summary["created"], summary["steps"]) == (1, 8), err
    steps = stored_steps("wrong_initial_state")
    assert [step.metadata.get("parent") for step in steps] == [None, 0, 1, 0, 3, 0, 5, 0]
    assert [step.labelable for step in steps] == [
        False,
        True,
        False,
        True,
        False,
        True,
        False,
        True,
    ]
