"""The typed reader of API pushes: a body it takes gives exactly the trajectories the
ordinary reading (the API's JSON parser, then ``stepscope.parse_records``) gives, and a
body it leaves (None) is one the ordinary reading must see: a bad record, labels, a
decisive failure, or a field it does not know."""

from __future__ import annotations

import gc
import io
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ParseError

from stepscope.parsers import JSONParser
from tests.conftest import REALDATA
from trajectories.api import ImportViewSet
from trajectories.formats import parser_for, stepscope, stepscope_typed
from trajectories.formats.base import STEP_KINDS, ParsedTrajectory, RecordError
from trajectories.formats.stepscope import to_record
from trajectories.formats.stepscope_typed import TypedRecords

REAL_FILES = [
    ("processbench", REALDATA / "processbench" / "gsm8k.json"),
    ("prm800k", REALDATA / "prm800k_sample" / "phase2_train_sample.jsonl"),
    ("openai-messages", REALDATA / "tau_bench" / "gpt-4o-airline.json"),
    ("swe-agent", REALDATA / "swe_agent" / "swe-agent__test-repo-i1.traj"),
    ("agent-session", REALDATA / "claude_code" / "short.jsonl"),
    ("langfuse", REALDATA / "langfuse" / "autogen-2025-06-06.trace.json"),
    ("openhands", REALDATA / "openhands" / "basic_interactions.json"),
    ("nemo-gym", REALDATA / "rl_nemo_gym" / "example_math_rollouts.jsonl"),
]


def ordinary(body: bytes) -> list[ParsedTrajectory | RecordError] | None:
    """What the API makes of the body without the typed reader: its records parsed,
    or None when the body is refused before any record is read."""
    try:
        data = JSONParser().parse(io.BytesIO(body))
    except ParseError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("trajectories"), list):
        return None
    return list(stepscope.parse_records(data["trajectories"]))


def typed(body: bytes) -> list[ParsedTrajectory] | None:
    decoded = stepscope_typed.push_decode(body)
    return None if decoded is None else list(decoded[1].parsed())


def assert_same_or_left(body: bytes) -> bool:
    """The typed reader leaves the body, or reads it as the ordinary reading does, which
    must then hold no error; True when the typed reader took it."""
    fast = typed(body)
    if fast is None:
        return False
    slow = ordinary(body)
    assert slow is not None and not any(isinstance(r, RecordError) for r in slow)
    assert fast == slow
    return True


def real_records(fmt: str, path: Path) -> list[dict[str, Any]]:
    return [
        to_record(result)
        for result in parser_for(fmt)(path)
        if isinstance(result, ParsedTrajectory)
    ]


def unlabelled(record: dict[str, Any]) -> dict[str, Any]:
    """The record without what only the ordinary parser takes (labels, verdicts)."""
    steps = [{**step, "labels": []} for step in record["steps"]]
    return {**record, "steps": steps, "first_error_index": None, "decisive": None}


def push(records: list[Any], **fields: Any) -> bytes:
    return json.dumps({"project": "p", **fields, "trajectories": records}).encode()


def test_step_kinds_are_the_formats() -> None:
    assert set(typing.get_args(stepscope_typed.StepKind)) == set(STEP_KINDS)


@pytest.mark.parametrize(("fmt", "path"), REAL_FILES, ids=[f for f, _ in REAL_FILES])
def test_real_records_read_as_the_ordinary_parser_reads_them(fmt: str, path: Path) -> None:
    records = [unlabelled(r) for r in real_records(fmt, path)]
    assert records
    body = push(records)
    assert assert_same_or_left(body), "the typed reader left unlabelled real records"
    # The body's own fields come through for the serializer to check.
    decoded = stepscope_typed.push_decode(push(records, skip_invalid=True, format="stepscope"))
    assert decoded is not None
    assert decoded[0] == {"project": "p", "skip_invalid": True, "format": "stepscope"}
    assert len(decoded[1]) == len(records)


def test_labels_and_verdicts_are_left_to_the_ordinary_parser() -> None:
    records = real_records("processbench", REALDATA / "processbench" / "gsm8k.json")[:5]
    assert any(r["first_error_index"] is not None for r in records)
    assert typed(push(records)) is None
    step = {"content": "x", "labels": [{"value": 1}]}
    assert typed(push([{"id": "a", "task": "t", "steps": [step]}])) is None
    decisive = {"agent": "", "step": 0, "reason": "wrong"}
    assert typed(push([{"id": "a", "task": "t", "steps": [step], "decisive": decisive}])) is None


GOOD = {"id": "a", "task": "t", "steps": [{"content": "x"}]}


@pytest.mark.parametrize(
    "body",
    [
        # Taken: the defaults, an integer reward, a user step, arguments, metadata.
        push([GOOD]),
        push([{**GOOD, "outcome": {"reward": 1, "success": True}}]),
        push([{**GOOD, "outcome": {"reward": None}, "first_error_index": None}]),
        push([{**GOOD, "steps": [{"content": "x", "role": "user", "kind": "observation"}]}]),
        push([{**GOOD, "steps": [{"content": "", "tool_args": {"b": [1, 2.5, None]}}]}]),
        push([{**GOOD, "metadata": {"n": 2**70, "x": 1e-7, "é": "\u2028"}}]),
        # Left, or read the same: every kind of wrong value.
        push([{**GOOD, "id": "  "}]),
        push([{**GOOD, "id": 3}]),
        push([{**GOOD, "steps": []}]),
        push([{**GOOD, "steps": [{"content": None}]}]),
        push([{**GOOD, "steps": [{"content": "x", "kind": "musing"}]}]),
        push([{**GOOD, "steps": [{"content": "x", "agent": None}]}]),
        push([{**GOOD, "steps": [{"content": "x", "labelable": 1}]}]),
        push([{**GOOD, "steps": [{"content": "x", "metadata": None}]}]),
        push([{**GOOD, "steps": [{"content": "x", "lables": []}]}]),
        push([{**GOOD, "outcome": {"reward": True}}]),
        push([{**GOOD, "outcome": {"success": 1}}]),
        push([{**GOOD, "outcome": None}]),
        push([{**GOOD, "outcome": {"reward": 1, "score": 2}}]),
        push([{**GOOD, "first_error_index": 0}]),
        push([{**GOOD, "metadata": []}]),
        push([GOOD, "not a record"]),
        push([GOOD], mapping={"id": "uid"}),
        push([]),
        b'{"project": "p", "trajectories": [{"id": "a", "task": "t", "task": "u", '
        b'"steps": [{"content": "x", "content": "y"}]}]}',
        b'{"project": "p", "trajectories": [{"id": "a", "task": "t", "steps": '
        b'[{"content": "\\ud800 \\u0000"}], "metadata": {"x": 1e400}}]}',
        b'\xef\xbb\xbf{"project": "p", "trajectories": []}',
        b'{"project": "p", "trajectories": [{"id": "\xff", "task": "t"}]}',
        b'{"project": "p", "trajectories": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"project": "p", "trajectories": [{"id": "a", "task": "t", "steps": '
        b'[{"content": "x", "metadata": {"deep": ' + b"[" * 5000 + b"]" * 5000 + b"}}]}]}",
        b"[]",
        b"{",
    ],
)
def test_typed_reader_takes_a_body_only_as_the_ordinary_reading_does(body: bytes) -> None:
    assert_same_or_left(body)


@pytest.mark.parametrize("depth", [100, 254, 256, 500, 990, 1010, 1023, 1025, 1500, 3000])
def test_deep_metadata_is_taken_only_as_deep_as_the_ordinary_reading_takes_it(
    depth: int,
) -> None:
    deep = b"[" * depth + b"]" * depth
    body = b'{"trajectories": [{"id": "a", "task": "t", "steps": [{"content": "x"}], '
    assert_same_or_left(body + b'"metadata": {"deep": ' + deep + b"}}]}")


def test_the_usual_push_is_taken() -> None:
    # Without this the typed reader could leave every body and pass the tests above.
    steps = [{"kind": "thought", "role": "assistant", "content": f"s{i}"} for i in range(3)]
    record = {**GOOD, "model": "m", "outcome": {"reward": 0.5}, "metadata": {}, "steps": steps}
    assert assert_same_or_left(push([record, {**record, "id": "b"}]))
    assert assert_same_or_left(push([{**GOOD, "metadata": {"n": 2**70, "x": 1e-7}}]))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
SOME_VALUE = st.sampled_from(["", " ", "x", "assistant", "thought", "musing"]) | JSON_VALUES


STEP = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["message", "thought", "answer", "musing"]) | SOME_VALUE,
        "role": st.sampled_from(["assistant", "user", "tool"]) | SOME_VALUE,
        "content": st.text(max_size=8) | SOME_VALUE,
        "labelable": st.booleans() | SOME_VALUE,
        "agent": SOME_VALUE,
        "tool_name": SOME_VALUE,
        "tool_args": JSON_VALUES,
        "metadata": st.dictionaries(st.text(max_size=3), JSON_VALUES, max_size=2) | SOME_VALUE,
        "labels": st.just([]) | SOME_VALUE,
        "unknown": SOME_VALUE,
    },
)
RECORD = st.fixed_dictionaries(
    {"steps": st.lists(STEP, max_size=3) | SOME_VALUE},
    optional={
        "id": st.text(max_size=3) | SOME_VALUE,
        "task": st.text(max_size=3) | SOME_VALUE,
        "task_key": SOME_VALUE,
        "model": SOME_VALUE,
        "outcome": st.fixed_dictionaries(
            {}, optional={"reward": SOME_VALUE, "success": SOME_VALUE, "other": SOME_VALUE}
        )
        | SOME_VALUE,
        "first_error_index": st.none() | SOME_VALUE,
        "decisive": st.none() | SOME_VALUE,
        "metadata": st.dictionaries(st.text(max_size=3), JSON_VALUES, max_size=2) | SOME_VALUE,
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, min_size=1, max_size=3))
def test_any_records_are_taken_only_as_the_ordinary_parser_takes_them(
    records: list[dict[str, Any]],
) -> None:
    assert_same_or_left(push(records))


def test_the_import_endpoint_reads_pushes_with_the_typed_reader() -> None:
    parser = ImportViewSet.parser_classes[0]()
    taken: Any = parser.parse(io.BytesIO(push([GOOD], skip_invalid=True)))
    assert isinstance(taken["trajectories"], TypedRecords)
    assert taken["skip_invalid"] is True
    left: Any = parser.parse(io.BytesIO(push([{**GOOD, "id": ""}])))
    assert left["trajectories"] == [{**GOOD, "id": ""}]


def tracked_lists() -> int:
    return sum(1 for value in gc.get_objects() if type(value) is list)


def test_records_are_read_once_and_let_go() -> None:
    """A request keeps what it parsed until a full garbage collection (DRF's request and
    view refer to each other), so the records let go of what they decoded as the import
    reads it. Each decoded step holds a list the collector tracks (its labels)."""
    steps = [{"content": f"s{i}"} for i in range(10)]
    decoded = stepscope_typed.push_decode(
        push([{**GOOD, "id": str(n), "steps": steps} for n in range(100)])
    )
    assert decoded is not None
    records = decoded[1]
    gc.disable()
    try:
        before = tracked_lists()
        read = list(records)
        assert [r.external_id for r in read] == [str(n) for n in range(100)]
        del read
        after = tracked_lists()
    finally:
        gc.enable()
    assert before - after >= 1000
    assert len(records) == 100
    assert list(records) == []
