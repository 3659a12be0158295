"""Random damage to valid input of every parser must give clean records, RecordErrors or a
FileError, and never any other exception: a bad upload is a message to the user, not a
crash of the import.

Two kinds of damage: to the bytes (flips, cuts, insertions: mostly broken JSON or a broken
zip), and to the decoded values (a value anywhere replaced by one of another type, or
removed: well-formed JSON that breaks the format's rules). A record that does come out must
be one the import can store: steps present, labels on labelable steps inside the
trajectory, metadata that is JSON.
"""

from __future__ import annotations

import copy
import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trajectories.formats import parser_for
from trajectories.formats.base import (
    STEP_KINDS,
    FileError,
    ParsedTrajectory,
    ParseResult,
    RecordError,
)
from trajectories.formats.mapped import parser_with_mapping

REPO_ROOT = Path(__file__).resolve().parents[2]
REALDATA = REPO_ROOT.parent / "shared" / "realdata"

Parser = Callable[[Path], Iterator[ParseResult]]


@dataclass(frozen=True)
class Seed:
    """Valid input for one parser: decoded values, and how to write them as a file."""

    name: str
    parser: Callable[[], Parser]
    value: Any
    # "json": one JSON value; "jsonl": a list, one per line; "eval": zip members; "lines":
    # a plain text file's lines (a line that damage made another value is its JSON).
    shape: str
    suffix: str


def render(shape: str, value: Any) -> bytes:
    if shape == "json":
        return json.dumps(value).encode()
    if shape == "jsonl":
        lines = value if isinstance(value, list) else [value]
        return "".join(json.dumps(line) + "\n" for line in lines).encode()
    if shape == "lines":
        rows = value if isinstance(value, list) else [value]
        text = [row if isinstance(row, str) else json.dumps(row) for row in rows]
        return "".join(row + "\n" for row in text).encode()
    members = value if isinstance(value, dict) else {"header.json": value}
    return zip_bytes({str(name): json.dumps(member).encode() for name, member in members.items()})


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            # zipfile cannot write a member without a name.
            archive.writestr(name or "unnamed", data)
    return buffer.getvalue()


def read_jsonl(path: Path, first: int = 0, count: int = 2) -> list[Any]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[first : first + count]]


def read_eval(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as archive:
        names = ["header.json", "samples/1_epoch_1.json", "samples/2_epoch_1.json"]
        return {name: json.loads(archive.read(name)) for name in names}


def registered(name: str) -> Callable[[], Parser]:
    return lambda: parser_for(name)


SHEPHERD = [
    {
        "input": "What is 2 + 3? Step 1: 2 + 3 = 5. ки\nStep 2: The answer is: 5 ки",
        "label": "What is 2 + 3? Step 1: 2 + 3 = 5. +\nStep 2: The answer is: 5 +",
        "task": "GSM8K",
    },
    {
        "input": "Find x - 1 if x = 3.\nx - 1 = 1. ки\nThe answer is 1. ки",
        "label": "Find x - 1 if x = 3.\nx - 1 = 1. -\nThe answer is 1. -",
    },
]
TRL = [
    {
        "prompt": "What is 2 + 3?",
        "completions": ["2 + 3 = 5.", "The answer is 5."],
        "labels": [True, True],
    },
    {"prompt": "What is 6 * 7?", "completions": ["6 * 7 = 48."], "labels": [False], "id": 7},
]
STEPSCOPE = [
    {
        "id": "run-1",
        "task": "Count the r's in strawberry.",
        "outcome": {"reward": 1, "success": True},
        "first_error_index": -1,
        "steps": [
            {"kind": "message", "role": "user", "content": "Count them."},
            {
                "kind": "tool_call",
                "content": "count",
                "tool_name": "python",
                "labels": [{"value": 1}],
            },
            {"kind": "answer", "content": "3", "labels": [{"annotator": "ann", "value": 0}]},
        ],
    }
]
WHO_AND_WHEN_MAPPING = {
    "records": "samples",
    "id": "question_ID",
    "task": "question",
    "outcome": "is_correct",
    "steps": "history",
    "step": {"content": "content", "role": "role", "agent": "name"},
    "first_error_index": "mistake_step",
    "metadata": ["level"],
    "decisive": {"agent": "mistake_agent", "step": "mistake_step", "reason": "mistake_reason"},
}
WHO_AND_WHEN = {
    "samples": [
        {
            "question_ID": "q1",
            "question": "Which city hosted the 1900 Olympics?",
            "is_correct": 0,
            "level": 1,
            "mistake_step": "2",
            "mistake_agent": "WebSurfer",
            "mistake_reason": "It read the wrong year.",
            "history": [
                {"content": "Which city?", "role": "user"},
                {"content": "Search.", "role": "assistant", "name": "Orchestrator"},
                {"content": "1904 host.", "role": "assistant", "name": "WebSurfer"},
            ],
        }
    ]
}
# Agents from name or role, as for the Who&When logs (tests/trajectories/test_formats_mapped.py).
WHO_AND_WHEN_LANES = {
    "id": "question_ID",
    "task": "question",
    "steps": "history",
    "step": {"content": "content", "role": "role", "agent": ["name", "role"]},
    "agent_pattern": r"(?P<agent>[^(]+?)(?: \(.*\))?$",
    "first_error_index": "mistake_step",
    "labelable": {"agents": "*", "input_agents": ["human"]},
}
PLAIN_MAPPING = {"id": "uid", "task": "problem", "steps": "steps", "first_error_index": "wrong"}
PLAIN = [
    {"uid": "a", "problem": "2 + 3 * 4?", "steps": ["3 * 4 = 12.", "2 + 12 = 15."], "wrong": 1},
    {"uid": "b", "problem": "1 + 1?", "steps": ["2"], "wrong": -1},
]


def seeds() -> list[Seed]:
    tau = json.loads((REALDATA / "tau_bench" / "gpt-4o-airline.json").read_text(encoding="utf-8"))
    gsm8k = json.loads((REALDATA / "processbench" / "gsm8k.json").read_text(encoding="utf-8"))
    swe = REALDATA / "swe_agent" / "swe-agent__test-repo-i1.traj"
    inspect_log = REALDATA / "inspect_logs" / "2025-05-12T20-28-13-04-00_popularity.json"
    inspect_eval = next((REALDATA / "inspect_logs").glob("*.eval"))
    prm = REALDATA / "prm800k_sample" / "phase2_train_sample.jsonl"
    spans = json.loads((REALDATA / "otel_openinference" / "all-spans.json").read_text())
    langfuse = REALDATA / "langfuse" / "autogen-2025-06-06.trace.json"
    langsmith = REALDATA / "langsmith" / "langsmith_py_wrap_openai_.json"
    claude = REALDATA / "claude_code" / "short.jsonl"
    codex = next((REALDATA / "codex").glob("rollout-2026-01-02*.jsonl"))
    pi = REALDATA / "pi_agent" / "large-session.jsonl"
    openhands = REALDATA / "openhands" / "basic_interactions.json"
    chatdev = next((REALDATA / "chatdev").glob("*.log"))
    nemo_gym = REALDATA / "rl_nemo_gym" / "example_math_rollouts.jsonl"
    verifiers = REALDATA / "rl_verifiers" / "math-python--gpt-4.1-mini" / "dbaac595"
    magentic = REALDATA / "multiagent_who_and_when" / "Hand-Crafted" / "24.json"
    return [
        Seed("stepscope", registered("stepscope"), STEPSCOPE, "jsonl", ".jsonl"),
        Seed("processbench", registered("processbench"), gsm8k[:2], "json", ".json"),
        Seed("openai-messages", registered("openai-messages"), tau[:1], "json", ".json"),
        Seed("prm800k", registered("prm800k"), read_jsonl(prm, first=2), "jsonl", ".jsonl"),
        Seed("math-shepherd", registered("math-shepherd"), SHEPHERD, "jsonl", ".jsonl"),
        Seed("trl-stepwise", registered("trl-stepwise"), TRL, "json", ".json"),
        Seed("swe-agent", registered("swe-agent"), json.loads(swe.read_text()), "json", ".traj"),
        Seed(
            "inspect-json",
            registered("inspect"),
            json.loads(inspect_log.read_text()),
            "json",
            ".json",
        ),
        Seed("inspect-eval", registered("inspect"), read_eval(inspect_eval), "eval", ".eval"),
        Seed(
            "mapped-records",
            lambda: parser_with_mapping(WHO_AND_WHEN_MAPPING),
            WHO_AND_WHEN,
            "json",
            ".json",
        ),
        Seed("mapped-plain", lambda: parser_with_mapping(PLAIN_MAPPING), PLAIN, "jsonl", ".jsonl"),
        Seed("otel", registered("otel"), spans[:2], "json", ".json"),
        Seed("langfuse", registered("langfuse"), json.loads(langfuse.read_text()), "json", ".json"),
        Seed(
            "langsmith", registered("langsmith"), json.loads(langsmith.read_text()), "json", ".json"
        ),
        # The first lines of each agent CLI's session: its header, a prompt, the model's
        # thinking, text and tool calls, and their results.
        Seed(
            "claude-code", registered("agent-session"), read_jsonl(claude, 0, 12), "jsonl", ".jsonl"
        ),
        Seed("codex", registered("agent-session"), read_jsonl(codex, 0, 16), "jsonl", ".jsonl"),
        Seed("pi", registered("agent-session"), read_jsonl(pi, 0, 10), "jsonl", ".jsonl"),
        Seed(
            "openhands", registered("openhands"), json.loads(openhands.read_text()), "json", ".json"
        ),
        # The log up to its first phase's conclusion: the task, a phase, its instruction,
        # the model call's tokens and the turn.
        Seed(
            "chatdev",
            registered("chatdev"),
            chatdev.read_text(encoding="utf-8").splitlines()[:115],
            "lines",
            ".log",
        ),
        # A rollout with tool calls and results, and one without.
        Seed("nemo-gym", registered("nemo-gym"), read_jsonl(nemo_gym, 3, 2), "jsonl", ".jsonl"),
        # Tool calls written as JSON text; no metadata.json beside the damaged file.
        Seed(
            "verifiers",
            registered("verifiers"),
            read_jsonl(verifiers / "results.jsonl", 0, 2),
            "jsonl",
            ".jsonl",
        ),
        Seed(
            "mapped-lanes",
            lambda: parser_with_mapping(WHO_AND_WHEN_LANES),
            json.loads(magentic.read_text()),
            "json",
            ".json",
        ),
    ]


SEEDS = {seed.name: seed for seed in seeds()}

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", " ", "ки", "+", "-", "C", "I", "7", "true", "attachment://x", "\n"])
    | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from paths(child, (*prefix, index))


def damage_value(data: st.DataObject, value: Any) -> Any:
    """Replace one value anywhere in ``value`` with another, or remove it."""
    path = data.draw(st.sampled_from(list(paths(value))), label="path")
    replacement = data.draw(JSON_VALUES, label="replacement")
    if not path:
        return replacement
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans(), label="remove"):
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return value


def damage_bytes(data: st.DataObject, raw: bytes) -> bytes:
    """Cut, overwrite, insert or delete a few bytes."""
    position = data.draw(st.integers(min_value=0, max_value=max(len(raw) - 1, 0)), label="at")
    how = data.draw(st.sampled_from(["cut", "overwrite", "insert", "delete"]), label="how")
    noise = data.draw(
        st.binary(min_size=1, max_size=4)
        | st.sampled_from([b"{", b"}", b"[", b"]", b'"', b",", b"\x00", b"\xff"]),
        label="noise",
    )
    if how == "cut":
        return raw[:position]
    if how == "overwrite":
        return raw[:position] + noise + raw[position + len(noise) :]
    if how == "insert":
        return raw[:position] + noise + raw[position:]
    return raw[:position] + raw[position + len(noise) :]


def assert_clean(result: Any) -> None:
    """A result the import service can store as it is."""
    if isinstance(result, RecordError):
        assert isinstance(result.location, str) and result.location
        assert isinstance(result.field, str)
        assert isinstance(result.message, str) and result.message
        return
    assert isinstance(result, ParsedTrajectory), result
    assert isinstance(result.external_id, str)
    assert result.external_id
    assert isinstance(result.task, str)
    assert result.steps
    for step in result.steps:
        assert step.kind in STEP_KINDS
        assert isinstance(step.content, str)
        assert isinstance(step.role, str) and isinstance(step.agent, str)
        assert isinstance(step.tool_name, str)
        json.dumps([step.metadata, step.tool_args], allow_nan=False)
    for label in result.labels:
        assert 0 <= label.step_index < len(result.steps)
        assert result.steps[label.step_index].labelable
        assert label.value in (-1, 0, 1)
    if result.first_error_index is not None:
        assert -1 <= result.first_error_index < len(result.steps)
    if result.outcome_reward is not None:
        assert isinstance(result.outcome_reward, float)
    assert result.success in (None, True, False)
    if result.parent_external_id:
        assert result.branch_index is not None
        assert 0 <= result.branch_index < len(result.steps)
    json.dumps([result.metadata, result.raw], allow_nan=False)


def parse_damaged(seed: Seed, raw: bytes, folder: Path) -> None:
    path = folder / f"damaged{seed.suffix}"
    path.write_bytes(raw)
    try:
        results = list(seed.parser()(path))
    except FileError:
        return
    for result in results:
        assert_clean(result)


FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.parametrize("name", list(SEEDS))
def test_seed_parses_cleanly(name: str, tmp_path: Path) -> None:
    seed = SEEDS[name]
    path = tmp_path / f"seed{seed.suffix}"
    path.write_bytes(render(seed.shape, seed.value))

    results = list(seed.parser()(path))

    assert results
    assert all(isinstance(result, ParsedTrajectory) for result in results)
    for result in results:
        assert_clean(result)


@pytest.mark.parametrize("name", list(SEEDS))
@FUZZ
@given(data=st.data())
def test_damaged_bytes_give_clean_results_or_errors(
    name: str, tmp_path: Path, data: st.DataObject
) -> None:
    seed = SEEDS[name]
    damages = data.draw(st.integers(min_value=1, max_value=3), label="damages")
    if seed.shape == "eval" and data.draw(st.booleans(), label="inside a member"):
        # Damage under an intact zip layer, which the archive's checksums would
        # otherwise catch first.
        members = {key: json.dumps(member).encode() for key, member in seed.value.items()}
        target = data.draw(st.sampled_from(sorted(members)), label="member")
        for _ in range(damages):
            members[target] = damage_bytes(data, members[target])
        raw = zip_bytes(members)
    else:
        raw = render(seed.shape, seed.value)
        for _ in range(damages):
            raw = damage_bytes(data, raw)
    parse_damaged(seed, raw, tmp_path)


@pytest.mark.parametrize("name", list(SEEDS))
@FUZZ
@given(data=st.data())
def test_damaged_values_give_clean_results_or_errors(
    name: str, tmp_path: Path, data: st.DataObject
) -> None:
    seed = SEEDS[name]
    value = copy.deepcopy(seed.value)
    for _ in range(data.draw(st.integers(min_value=1, max_value=3), label="damages")):
        value = damage_value(data, value)
    parse_damaged(seed, render(seed.shape, value), tmp_path)
