"""COPY text encoding: escapes, and the refusal of what PostgreSQL cannot store."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trajectories import pgcopy
from trajectories.formats.base import ParsedStep, StepTraining

NO_TRAINING = {
    "policy_version": "",
    "training_step": "\\N",
    "logprob_sum": "\\N",
    "logprob_mean": "\\N",
    "logprob_min": "\\N",
    "advantage": "\\N",
    "returns": "\\N",
    "token_logprobs": "\\N",
}

ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


@given(st.text(alphabet=st.sampled_from("ab\\\n\r\t\\né"), max_size=30))
def test_text_escapes_exactly_the_four_copy_characters(value: str) -> None:
    assert pgcopy.text(value) == value.translate(ESCAPES)


@pytest.mark.parametrize("value", ["nul \x00 byte", "lone \ud800 surrogate"])
def test_text_refuses_what_postgres_cannot_store(value: str) -> None:
    with pytest.raises(ValueError):
        pgcopy.text(value)


def test_step_rows_follow_step_columns() -> None:
    steps = [
        ParsedStep(kind="thought", role="assistant", content="a\tb\\n", labelable=True),
        ParsedStep(
            kind="tool_call",
            role="assistant",
            content="",
            labelable=False,
            agent="solver",
            tool_name="calc",
            tool_args={"x": "1\n2"},
            metadata={"k": 1},
            training=StepTraining(
                policy_version="v\t3",
                training_step=12,
                logprob_sum=-1.5,
                logprob_mean=-0.75,
                logprob_min=-1.0,
                advantage=0.25,
                returns=1.0,
                token_logprobs=[-0.5, -1.0],
            ),
        ),
    ]
    encoded = pgcopy.step_rows(steps, ["h0", "h1"]).encode()
    rows = pgcopy.first_column_filled(encoded, 7).decode().splitlines()
    columns = [c.strip() for c in pgcopy.STEP_COLUMNS.split(",")]
    first, second = (dict(zip(columns, row.split("\t"), strict=True)) for row in rows)
    assert first == {
        "trajectory_id": "7",
        "index": "0",
        "prefix_hash": "h0",
        "kind": "thought",
        "role": "assistant",
        "agent": "",
        "tool_name": "",
        "labelable": "t",
        "tool_args": "\\N",
        "metadata": "{}",
        **NO_TRAINING,
        "content": "a\\tb\\\\n",
    }
    assert second == {
        "trajectory_id": "7",
        "index": "1",
        "prefix_hash": "h1",
        "kind": "tool_call",
        "role": "assistant",
        "agent": "solver",
        "tool_name": "calc",
        "labelable": "f",
        "tool_args": '{"x":"1\\\\n2"}',
        "metadata": '{"k":1}',
        "policy_version": "v\\t3",
        "training_step": "12",
        "logprob_sum": "-1.5",
        "logprob_mean": "-0.75",
        "logprob_min": "-1.0",
        "advantage": "0.25",
        "returns": "1.0",
        "token_logprobs": "[-0.5,-1.0]",
        "content": "",
    }


@given(st.lists(st.text(alphabet="ab\\\n\t", max_size=8), max_size=5), st.integers(0, 10**12))
def test_first_column_filled_puts_the_value_first_on_every_row(
    contents: list[str], value: int
) -> None:
    steps = [ParsedStep(kind="thought", role="", content=c, labelable=False) for c in contents]
    rows = pgcopy.step_rows(steps, [f"h{n}" for n in range(len(steps))])
    filled = pgcopy.first_column_filled(rows.encode(), value).decode()
    assert filled.splitlines() == [f"{value}{row}" for row in rows.splitlines()]
    assert [row.split("\t")[2] for row in filled.splitlines()] == [
        f"h{n}" for n in range(len(steps))
    ]


storable_text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(storable_text, inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_json_text_holds_the_same_value(value: object) -> None:
    encoded = pgcopy.json_text(value)
    if value is None:
        assert encoded == "\\N"
    else:
        # JSON text has no raw newline or tab, so only doubled backslashes to undo.
        assert json.loads(encoded.replace("\\\\", "\\")) == value


@pytest.mark.parametrize("value", [{"a": float("inf")}, [1, None, float("nan")]])
def test_json_text_refuses_what_jsonb_cannot_hold(value: object) -> None:
    with pytest.raises(ValueError):
        pgcopy.json_text(value)


def test_json_text_keeps_integers_beyond_64_bits() -> None:
    assert pgcopy.json_text({"n": 10**30}) == '{"n": 1000000000000000000000000000000}'
