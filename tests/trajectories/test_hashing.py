"""Prefix hashes: the fast chain in ``prefix_hashes`` hashes exactly the bytes that
``_step_bytes`` defines, so hashes stored by earlier imports still match."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from trajectories.formats.base import STEP_KINDS, ParsedStep
from trajectories.hashing import _field, _step_bytes, prefix_hashes

short_text = st.sampled_from(["", "assistant", "user", "solver", "é", "a\tb"]) | st.text(max_size=5)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
steps = st.builds(
    ParsedStep,
    kind=st.sampled_from(STEP_KINDS),
    role=short_text,
    content=st.text(max_size=40),
    labelable=st.booleans(),
    agent=short_text,
    tool_name=short_text,
    tool_args=json_values,
)


def reference_chain(task: str, chain: list[ParsedStep]) -> list[str]:
    current = hashlib.sha256(b"task" + _field(task)).digest()
    hashes = []
    for step in chain:
        current = hashlib.sha256(current + _step_bytes(step)).digest()
        hashes.append(current.hex())
    return hashes


@given(task=st.text(max_size=20), chain=st.lists(steps, max_size=6))
def test_fast_chain_hashes_the_defined_bytes(task: str, chain: list[ParsedStep]) -> None:
    assert prefix_hashes(task, chain) == reference_chain(task, chain)


def test_hashes_of_earlier_imports_still_match() -> None:
    # Computed by the hashing code before the fast chain; stored prefix hashes must
    # keep matching re-imports and rollouts of the same steps.
    step = ParsedStep(kind="thought", role="assistant", content="2 + 2 = 4", labelable=True)
    call = ParsedStep(
        kind="tool_call",
        role="assistant",
        content="",
        labelable=True,
        tool_name="calc",
        tool_args={"x": [1, "é"]},
    )
    assert prefix_hashes("add", [step, call]) == [
        "05509948032c7f3f8bc05a7571ea690fd605d218236b1856f60d1b88a6d492da",
        "5f102a58732234abed20a0f48533ef53d5fe1120cb623bdee081f612b299b6ae",
    ]
