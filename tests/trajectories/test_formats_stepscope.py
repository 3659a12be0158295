"""The Stepscope JSONL parser: every field, its defaults, its errors, and a lossless
round trip through :func:`to_record` (including the real ProcessBench and tau-bench
files, so an export of anything we import reads back the same)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trajectories.formats import parser_for, stepscope
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedDecisive,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    StepTraining,
)
from trajectories.formats.stepscope import parse, to_record
from trajectories.hashing import content_hash

REPO_ROOT = Path(__file__).resolve().parents[2]
REALDATA = REPO_ROOT.parent / "shared" / "realdata"

FULL_RECORD: dict[str, Any] = {
    "id": "run-7",
    "task": "How many r's are in strawberry?",
    "task_key": "strawberry",
    "ground_truth": "3",
    "model": "gpt-4o",
    "outcome": {"reward": 1, "success": True},
    "first_error_index": -1,
    "metadata": {"seed": 7, "tags": ["demo"]},
    "steps": [
        {
            "kind": "message",
            "role": "user",
            "content": "How many r's are in strawberry?",
            "agent": "user-sim",
        },
        {
            "kind": "tool_call",
            "role": "assistant",
            "content": "Let me count with code.",
            "agent": "solver",
            "tool_name": "python",
            "tool_args": {"code": "'strawberry'.count('r')"},
            "metadata": {"latency_ms": 812},
            "labels": [
                {"annotator": "alice", "value": 1},
                {"annotator": "bob", "value": 0},
            ],
        },
        {
            "kind": "tool_result",
            "role": "tool",
            "content": "3",
            "tool_name": "python",
            "labelable": False,
        },
        {
            "kind": "answer",
            "content": "There are 3.",
            "labels": [{"value": 1}],
        },
    ],
}


def write_lines(path: Path, lines: list[Any]) -> Path:
    """Write one JSON value per line; a str is written as it is (blank or broken lines)."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def trajectories(results: list[ParseResult]) -> list[ParsedTrajectory]:
    errors = [result for result in results if isinstance(result, RecordError)]
    assert errors == []
    return [result for result in results if isinstance(result, ParsedTrajectory)]


def content(trajectory: ParsedTrajectory) -> dict[str, Any]:
    """Everything parsed from the record, without where it came from."""
    fields = dataclasses.asdict(trajectory)
    del fields["raw"], fields["location"]
    return fields


def test_registered_under_its_format_name() -> None:
    assert parser_for("stepscope") is parse


def test_every_field_is_read(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "runs.jsonl", [FULL_RECORD])

    [trajectory] = trajectories(list(parse(path)))

    assert trajectory.external_id == "run-7"
    assert trajectory.task == "How many r's are in strawberry?"
    assert trajectory.task_key == "strawberry"
    assert trajectory.ground_truth == "3"
    assert trajectory.model_name == "gpt-4o"
    assert trajectory.outcome_reward == 1.0
    assert isinstance(trajectory.outcome_reward, float)
    assert trajectory.success is True
    assert trajectory.first_error_index == -1
    assert trajectory.metadata == {"seed": 7, "tags": ["demo"]}
    # The format is lossless, so no separate raw copy is kept (to_record rebuilds it).
    assert trajectory.raw is None
    assert trajectory.location == "line 1"
    assert trajectory.steps == [
        ParsedStep(
            kind="message",
            role="user",
            content="How many r's are in strawberry?",
            labelable=False,
            agent="user-sim",
        ),
        ParsedStep(
            kind="tool_call",
            role="assistant",
            content="Let me count with code.",
            labelable=True,
            agent="solver",
            tool_name="python",
            tool_args={"code": "'strawberry'.count('r')"},
            metadata={"latency_ms": 812},
        ),
        ParsedStep(
            kind="tool_result", role="tool", content="3", labelable=False, tool_name="python"
        ),
        ParsedStep(kind="answer", role="assistant", content="There are 3.", labelable=True),
    ]
    assert trajectory.labels == [
        ParsedLabel(step_index=1, value=1, annotator="alice"),
        ParsedLabel(step_index=1, value=0, annotator="bob"),
        ParsedLabel(step_index=3, value=1, annotator="import:stepscope"),
    ]


def test_minimal_record_gets_defaults(tmp_path: Path) -> None:
    record = {
        "id": "a",
        "task": "t",
        "steps": [{"content": "hi"}, {"role": "user", "content": "?"}],
    }
    path = write_lines(tmp_path / "runs.jsonl", [record])

    [trajectory] = trajectories(list(parse(path)))

    assert trajectory.steps == [
        ParsedStep(kind="message", role="assistant", content="hi", labelable=True),
        ParsedStep(kind="message", role="user", content="?", labelable=False),
    ]
    assert (trajectory.task_key, trajectory.ground_truth, trajectory.model_name) == ("", "", "")
    assert (trajectory.outcome_reward, trajectory.success) == (None, None)
    assert trajectory.first_error_index is None
    assert trajectory.metadata == {}
    assert trajectory.labels == []


def test_labelable_can_be_set_against_the_role_default(tmp_path: Path) -> None:
    record = {
        "id": "a",
        "task": "t",
        "steps": [
            {"role": "assistant", "content": "boilerplate", "labelable": False},
            {"role": "user", "content": "a user turn worth judging", "labelable": True},
        ],
    }
    path = write_lines(tmp_path / "runs.jsonl", [record])

    [trajectory] = trajectories(list(parse(path)))

    assert [step.labelable for step in trajectory.steps] == [False, True]


def test_blank_lines_are_skipped_and_locations_count_every_line(tmp_path: Path) -> None:
    first = {"id": "a", "task": "t", "steps": [{"content": "x"}]}
    second = {**first, "id": "b"}
    path = write_lines(tmp_path / "runs.jsonl", ["", first, "   ", "", second, ""])

    results = trajectories(list(parse(path)))

    assert [(t.external_id, t.location) for t in results] == [("a", "line 2"), ("b", "line 5")]


def test_round_trip_keeps_every_parsed_field(tmp_path: Path) -> None:
    first = list(parse(write_lines(tmp_path / "a.jsonl", [FULL_RECORD])))
    again = list(
        parse(write_lines(tmp_path / "b.jsonl", [to_record(t) for t in trajectories(first)]))
    )

    assert [content(t) for t in trajectories(again)] == [content(t) for t in trajectories(first)]


@pytest.mark.parametrize(
    ("format_name", "relative_path", "count"),
    [
        ("processbench", "processbench/gsm8k.json", 400),
        ("openai-messages", "tau_bench/gpt-4o-airline.json", 200),
    ],
)
def test_real_imports_round_trip_through_stepscope_jsonl(
    tmp_path: Path, format_name: str, relative_path: str, count: int
) -> None:
    imported = trajectories(list(parser_for(format_name)(REALDATA / relative_path)))
    path = write_lines(tmp_path / "export.jsonl", [to_record(t) for t in imported])

    exported = trajectories(list(parse(path)))

    assert len(exported) == count
    assert [content(t) for t in exported] == [content(t) for t in imported]


DELETE = object()


def broken(change: dict[str, Any]) -> dict[str, Any]:
    """FULL_RECORD with ``change`` applied: a key maps to its new value, or to
    ``DELETE``; ``"steps.N"`` keys change one step the same way."""
    record = copy.deepcopy(FULL_RECORD)
    for key, value in change.items():
        target, name = record, key
        if key.startswith("steps."):
            _, index, name = key.split(".", 2)
            target = record["steps"][int(index)]
        if value is DELETE:
            del target[name]
        else:
            target[name] = value
    return record


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"id": DELETE}, "id", "is missing"),
        ({"id": 7}, "id", "expected str, got int"),
        ({"id": "  "}, "id", "is empty"),
        ({"task": DELETE}, "task", "is missing"),
        ({"steps": []}, "steps", "is empty"),
        ({"steps": "one"}, "steps", "expected list"),
        ({"steps": ["one"]}, "steps.0", "expected a step object"),
        ({"modle": "gpt-4o"}, "modle", "unknown field"),
        ({"outcome": {"reward": 1, "succes": True}}, "outcome.succes", "unknown field"),
        ({"outcome": {"reward": True}}, "outcome.reward", "expected int or float, got bool"),
        ({"outcome": {"success": 1}}, "outcome.success", "expected bool, got int"),
        ({"first_error_index": 4}, "first_error_index", "from 0 to 3"),
        ({"first_error_index": -2}, "first_error_index", "expected -1"),
        ({"metadata": []}, "metadata", "expected dict"),
        ({"steps.2.content": DELETE}, "steps.2.content", "is missing"),
        ({"steps.2.content": None}, "steps.2.content", "expected str, got NoneType"),
        ({"steps.1.kind": "plan"}, "steps.1.kind", "expected one of message, thought"),
        ({"steps.1.lables": []}, "steps.1.lables", "unknown field"),
        ({"steps.1.labelable": "yes"}, "steps.1.labelable", "expected bool"),
        ({"steps.1.labels": [{"value": 2}]}, "steps.1.labels.0.value", "expected -1, 0 or 1"),
        ({"steps.1.labels": [{"value": 1.0}]}, "steps.1.labels.0.value", "expected int"),
        ({"steps.1.labels": [{"value": True}]}, "steps.1.labels.0.value", "got bool"),
        ({"steps.1.labels": [{"annotator": "a"}]}, "steps.1.labels.0.value", "is missing"),
        ({"steps.1.labels": [{"value": 1, "who": "a"}]}, "steps.1.labels.0.who", "unknown"),
        (
            {"steps.1.labels": [{"annotator": "a", "value": 1}, {"annotator": "a", "value": -1}]},
            "steps.1.labels.1.annotator",
            "already labels this step",
        ),
        (
            {
                "steps.1.labels": [
                    {"annotator": "a", "value": 1},
                    {"annotator": "import:a", "value": -1},
                ]
            },
            "steps.1.labels.1.annotator",
            "'import:a' already labels this step",
        ),
        ({"steps.2.labels": [{"value": 1}]}, "steps.2.labels", "labelable false"),
        ({"decisive": "solver"}, "decisive", "expected dict, got str"),
        ({"decisive": {}}, "decisive", "names neither an agent nor a step"),
        ({"decisive": {"reason": "why"}}, "decisive", "names neither an agent nor a step"),
        ({"decisive": {"agent": "solver", "stepp": 1}}, "decisive.stepp", "unknown field"),
        ({"decisive": {"step": 4}}, "decisive.step", "is 4; expected a step index from 0 to 3"),
        ({"decisive": {"step": -1}}, "decisive.step", "from 0 to 3"),
        ({"decisive": {"step": "1"}}, "decisive.step", "expected int, got str"),
        ({"decisive": {"step": True}}, "decisive.step", "expected int, got bool"),
        ({"decisive": {"agent": 3}}, "decisive.agent", "expected str, got int"),
        (
            {"decisive": {"agent": "user-sim", "step": 0}},
            "decisive.agent",
            "is 'user-sim', not one of the trajectory's agents (solver)",
        ),
        ({"decisive": {"agent": "solver", "reason": 1}}, "decisive.reason", "expected str"),
        ({"training": {"policy": "v1"}}, "training.policy", "unknown field"),
        ({"training": {"training_step": 1.5}}, "training.training_step", "expected int"),
        ({"training": {"policy_version": " "}}, "training.policy_version", "is empty"),
        ({"steps.1.training": []}, "steps.1.training", "expected dict, got list"),
        ({"steps.1.training": {"advantge": 1}}, "steps.1.training.advantge", "unknown field"),
        (
            {"steps.1.training": {"advantage": "high"}},
            "steps.1.training.advantage",
            "expected int or float, got str",
        ),
        ({"steps.1.training": {"returns": True}}, "steps.1.training.returns", "got bool"),
        (
            {"steps.1.training": {"token_logprobs": [-1, "x"]}},
            "steps.1.training.token_logprobs.1",
            "expected a number, got str",
        ),
        ({"steps.1.training": {"policy_version": 3}}, "steps.1.training.policy_version", "str"),
    ],
)
def test_malformed_record_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    good = {"id": "ok", "task": "t", "steps": [{"content": "x"}]}
    path = write_lines(tmp_path / "runs.jsonl", [good, broken(change), good])

    results = list(parse(path))

    assert len(results) == 3
    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("line 2", field)
    assert message in error.message
    assert all(isinstance(result, ParsedTrajectory) for result in (results[0], results[2]))


def test_line_3_without_content_is_reported_and_the_rest_still_parse(tmp_path: Path) -> None:
    lines = [broken({}), broken({"id": "b"}), broken({"id": "c", "steps.3.content": DELETE})]
    path = write_lines(tmp_path / "runs.jsonl", [*lines, broken({"id": "d"})])

    results = list(parse(path))

    assert results[2] == RecordError("line 3", "steps.3.content", "is missing")
    assert [r.external_id for r in results if isinstance(r, ParsedTrajectory)] == [
        "run-7",
        "b",
        "d",
    ]


def test_broken_json_after_the_first_line_is_one_bad_record(tmp_path: Path) -> None:
    good = {"id": "a", "task": "t", "steps": [{"content": "x"}]}
    path = write_lines(tmp_path / "runs.jsonl", [good, '{"id": "b", "task": ', [1, 2], good])

    results = list(parse(path))

    assert isinstance(results[1], RecordError)
    assert (results[1].location, results[1].field) == ("line 2", "")
    assert "not valid JSON" in results[1].message
    assert results[2] == RecordError("line 3", "", "expected a trajectory object, got list")
    assert isinstance(results[3], ParsedTrajectory)


def test_nan_is_rejected_because_the_database_cannot_store_it(tmp_path: Path) -> None:
    good = {"id": "a", "task": "t", "steps": [{"content": "x"}]}
    nan_line = '{"id": "b", "task": "t", "outcome": {"reward": NaN}, "steps": [{"content": "x"}]}'
    path = write_lines(tmp_path / "runs.jsonl", [good, nan_line])

    results = list(parse(path))

    assert isinstance(results[1], RecordError)
    assert "NaN is not a JSON value" in results[1].message


def test_bad_bytes_on_one_line_spoil_only_that_line(tmp_path: Path) -> None:
    good = json.dumps({"id": "a", "task": "t", "steps": [{"content": "x"}]}).encode()
    path = tmp_path / "runs.jsonl"
    path.write_bytes(good + b"\n" + b'{"id": "\xff"}\n' + good + b"\n")

    results = list(parse(path))

    assert isinstance(results[1], RecordError)
    assert results[1].location == "line 2"
    assert "not UTF-8" in results[1].message
    assert isinstance(results[2], ParsedTrajectory)


def test_not_json_file_is_a_file_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("id,task\n1,hello\n", encoding="utf-8")

    with pytest.raises(FileError, match=r"notes\.txt: not Stepscope JSONL: line 1 is not valid"):
        list(parse(path))


def test_json_array_file_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([FULL_RECORD]), encoding="utf-8")

    with pytest.raises(FileError, match=r"runs\.json: not Stepscope JSONL: line 1 holds a list"):
        list(parse(path))


def test_missing_file_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(FileError, match=r"absent\.jsonl: cannot be read"):
        list(parse(tmp_path / "absent.jsonl"))


def test_to_record_refuses_a_label_outside_the_steps() -> None:
    trajectory = ParsedTrajectory(
        external_id="a",
        task="t",
        steps=[ParsedStep(kind="message", role="assistant", content="x", labelable=True)],
        labels=[ParsedLabel(step_index=1, value=1, annotator="a")],
    )

    with pytest.raises(ValueError, match="step 1"):
        to_record(trajectory)


step_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from(["", "assistant", "user", "thought", "message", "tool_call", "bogus"]),
    st.dictionaries(st.sampled_from(["a", "b"]), st.integers(), max_size=2),
    st.lists(
        st.fixed_dictionaries({"value": st.integers(-1, 1)}, optional={"annotator": st.text()}),
        max_size=2,
    ),
)
raw_steps = st.one_of(
    st.dictionaries(
        st.sampled_from(
            [
                "kind",
                "role",
                "content",
                "labelable",
                "agent",
                "tool_name",
                "tool_args",
                "metadata",
                "labels",
                "extra",
            ]
        ),
        step_values,
    ),
    step_values,
)


@settings(max_examples=400)
@given(raw=raw_steps)
def test_plain_step_check_accepts_exactly_what_the_full_check_accepts(raw: Any) -> None:
    """The quick check for plain steps must agree with the field-by-field one: the same
    step when it accepts, and no opinion (None) whenever the full check would raise or
    would find labels."""
    plain = stepscope._plain_step(raw)
    try:
        step, labels = stepscope._step(raw, 0)
    except FieldError:
        assert plain is None
        return
    if labels:
        assert plain is None
    elif plain is not None:
        assert plain == step


def test_plain_step_check_takes_the_common_step() -> None:
    raw = {"kind": "thought", "content": "2 + 2 = 4", "labels": []}
    assert stepscope._plain_step(raw) == ParsedStep(
        kind="thought", role="assistant", content="2 + 2 = 4", labelable=True
    )


@pytest.mark.parametrize(
    ("decisive", "expected"),
    [
        (
            {"agent": "solver", "step": 1, "reason": "counted <b>wrong</b>"},
            ParsedDecisive(agent="solver", step_index=1, reason="counted <b>wrong</b>"),
        ),
        ({"step": 3}, ParsedDecisive(agent="", step_index=3, reason="")),
        ({"agent": "solver", "step": None}, ParsedDecisive(agent="solver", step_index=None)),
        (None, None),
    ],
)
def test_decisive_failure_is_read_and_written_back(
    tmp_path: Path, decisive: dict[str, Any] | None, expected: ParsedDecisive | None
) -> None:
    record = broken({"decisive": decisive})
    [parsed] = trajectories(list(parse(write_lines(tmp_path / "runs.jsonl", [record]))))
    assert parsed.decisive == expected
    written = to_record(parsed)
    assert list(written).index("decisive") == list(written).index("first_error_index") + 1
    again = write_lines(tmp_path / "again.jsonl", [written])
    assert trajectories(list(parse(again)))[0].decisive == expected


def test_decisive_agent_is_a_role_where_no_step_names_an_agent(tmp_path: Path) -> None:
    record = {
        "id": "m1",
        "task": "t",
        "steps": [
            {"role": "user", "content": "go"},
            {"role": "Orchestrator (thought)", "content": "plan", "labelable": True},
            {"role": "WebSurfer", "content": "search", "labelable": True},
        ],
        "decisive": {"agent": "WebSurfer", "step": 2},
    }
    bad = dict(record, id="m2", decisive={"agent": "Orchestrator (thought)"})
    results = list(parse(write_lines(tmp_path / "runs.jsonl", [record, bad])))
    assert isinstance(results[0], ParsedTrajectory)
    assert results[0].decisive == ParsedDecisive(agent="WebSurfer", step_index=2)
    assert results[1] == RecordError(
        "line 2",
        "decisive.agent",
        "is 'Orchestrator (thought)', not one of the trajectory's agents (Orchestrator, WebSurfer)",
    )


def test_training_facts_are_read_and_written_back(tmp_path: Path) -> None:
    record = copy.deepcopy(FULL_RECORD)
    record["training"] = {"policy_version": "global_step_3", "training_step": 3}
    record["steps"][1]["training"] = {
        "policy_version": "global_step_3",
        "training_step": 3,
        "logprob_sum": -2,
        "logprob_mean": -0.5,
        "logprob_min": -1.25,
        "advantage": 0.75,
        "returns": 1,
        "token_logprobs": [-0.25, -0.25, -0.25, -1.25],
    }
    record["steps"][3]["training"] = {"advantage": -0.5}
    [parsed] = trajectories(list(parse(write_lines(tmp_path / "rl.jsonl", [record]))))

    assert (parsed.policy_version, parsed.training_step) == ("global_step_3", 3)
    assert parsed.steps[0].training is None
    assert parsed.steps[1].training == StepTraining(
        policy_version="global_step_3",
        training_step=3,
        logprob_sum=-2.0,
        logprob_mean=-0.5,
        logprob_min=-1.25,
        advantage=0.75,
        returns=1.0,
        token_logprobs=[-0.25, -0.25, -0.25, -1.25],
    )
    assert parsed.steps[3].training == StepTraining(advantage=-0.5)
    written = to_record(parsed)
    assert written["training"] == record["training"]
    assert written["steps"][3]["training"] == {"advantage": -0.5}
    [again] = trajectories(list(parse(write_lines(tmp_path / "again.jsonl", [written]))))
    assert dataclasses.replace(again, location="") == dataclasses.replace(parsed, location="")


def test_training_facts_change_the_content_hash() -> None:
    steps = [ParsedStep(kind="answer", role="assistant", content="14", labelable=True)]
    plain = ParsedTrajectory(external_id="a", task="t", steps=steps)
    trained = dataclasses.replace(
        plain,
        steps=[dataclasses.replace(steps[0], training=StepTraining(advantage=1.0))],
    )
    versioned = dataclasses.replace(plain, policy_version="v2")
    digests = {content_hash(t, "stepscope") for t in (plain, trained, versioned)}
    assert len(digests) == 3
