"""Prefix and content hashes: the fast chain in ``prefix_hashes`` hashes exactly the
bytes that ``_step_bytes`` defines, and ``content_hash`` the canonical JSON of the
trajectory's fields, so hashes stored by earlier imports still match."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from trajectories.formats.base import (
    STEP_KINDS,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    imported_annotator_name,
)
from trajectories.hashing import (
    _canonical,
    _canonical_json,
    _field,
    _step_bytes,
    content_hash,
    prefix_hashes,
)

short_text = st.sampled_from(["", "assistant", "user", "solver", "é", "a\tb"]) | st.text(max_size=5)
# Floats of every size (json and orjson write the small ones differently), integers past
# 64 bits, and text with escapes and characters outside the BMP.
json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 2, max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.text(max_size=5)
    | st.sampled_from(["1e-5", "0.00001", 'a\n\u0001"', "\u2028😀"])
)
json_values = st.recursive(
    json_leaves,
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
    metadata=st.dictionaries(st.text(max_size=3), json_values, max_size=2),
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


def reference_content_hash(trajectory: ParsedTrajectory, source_format: str) -> str:
    """The definition: the last prefix hash, then the canonical JSON of every field."""
    chain = prefix_hashes(trajectory.task, trajectory.steps)
    digest = hashlib.sha256(chain[-1].encode() if chain else b"")
    digest.update(
        _canonical_json(
            [
                source_format,
                trajectory.external_id,
                trajectory.task_key,
                trajectory.ground_truth,
                trajectory.model_name,
                trajectory.outcome_reward,
                trajectory.success,
                trajectory.first_error_index,
                trajectory.parent_external_id,
                trajectory.branch_index,
                trajectory.metadata,
                [[step.labelable, step.metadata or None] for step in trajectory.steps],
                [
                    [label.step_index, label.value, imported_annotator_name(label.annotator)]
                    for label in trajectory.labels
                ],
            ]
        )
    )
    return digest.hexdigest()


trajectories = st.builds(
    ParsedTrajectory,
    external_id=short_text,
    task=st.text(max_size=10),
    # Half the time without step metadata: the fast path of content_hash.
    steps=st.lists(steps, max_size=4)
    | st.lists(
        st.builds(
            ParsedStep,
            kind=st.just("thought"),
            role=short_text,
            content=st.text(max_size=10),
            labelable=st.booleans(),
        ),
        max_size=4,
    ),
    task_key=short_text,
    model_name=short_text,
    outcome_reward=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    success=st.none() | st.booleans(),
    first_error_index=st.none() | st.integers(-1, 5),
    metadata=st.dictionaries(st.text(max_size=3), json_values, max_size=2),
    labels=st.lists(
        st.builds(
            ParsedLabel,
            step_index=st.integers(0, 3),
            value=st.integers(-1, 1),
            annotator=short_text,
        ),
        max_size=2,
    ),
    parent_external_id=short_text,
    branch_index=st.none() | st.integers(0, 3),
)


@given(trajectory=trajectories, source_format=st.sampled_from(["stepscope", "prm800k"]))
def test_content_hash_hashes_the_defined_bytes(
    trajectory: ParsedTrajectory, source_format: str
) -> None:
    assert content_hash(trajectory, source_format) == reference_content_hash(
        trajectory, source_format
    )


def test_content_hashes_of_earlier_imports_still_match() -> None:
    # Computed by the hashing code before its fast path for steps without metadata;
    # re-importing the same records must keep finding them.
    plain = ParsedStep(kind="thought", role="assistant", content="2 + 2 = 4", labelable=True)
    noted = ParsedStep(
        kind="observation", role="tool", content="4", labelable=False, metadata={"t": 1}
    )
    first = ParsedTrajectory(
        external_id="a", task="add", steps=[plain], outcome_reward=1.0, success=True
    )
    second = ParsedTrajectory(
        external_id="b",
        task="add",
        steps=[plain, noted],
        labels=[ParsedLabel(0, 1, "import:x")],
        metadata={"é": [1, None]},
    )
    assert content_hash(first, "stepscope") == (
        "de9dda1934038d80e78a566c60cd431858622b228b53386d7f5ffc4cabea76c8"
    )
    assert content_hash(second, "stepscope") == (
        "aafcbfd8db345fce83c31194a3643b42b324be93cd30e5587ad709be5a436f51"
    )


def test_an_annotator_hashes_like_the_user_it_becomes() -> None:
    # An export writes ``import:stepscope`` as ``stepscope``: pushed back, the record
    # must hash as it did, or the project gets a second copy of it.
    step = ParsedStep(kind="thought", role="assistant", content="2", labelable=True)

    def labelled(annotator: str) -> ParsedTrajectory:
        labels = [ParsedLabel(0, 1, annotator)]
        return ParsedTrajectory(external_id="a", task="1+1?", steps=[step], labels=labels)

    assert content_hash(labelled("stepscope"), "stepscope") == content_hash(
        labelled("import:stepscope"), "stepscope"
    )
    assert content_hash(labelled("alice"), "stepscope") != content_hash(
        labelled("import:stepscope"), "stepscope"
    )


@given(value=json_values)
def test_canonical_json_is_the_defined_bytes(value: object) -> None:
    assert _canonical(value) == _canonical_json(value)


def test_canonical_json_of_values_orjson_writes_otherwise() -> None:
    for value in [
        1e-5,
        -1.5e-7,
        5e-324,
        9.9e-5,
        1e-4,
        1e16,
        1e300,
        2**64,
        {1: "a"},
        {"b": 1, "a": 2},
    ]:
        assert _canonical(value) == _canonical_json(value)


def test_a_reward_that_is_not_a_number_does_not_hash_like_no_reward() -> None:
    step = ParsedStep(kind="thought", role="assistant", content="x", labelable=True)
    hashes = {
        reward: content_hash(
            ParsedTrajectory(external_id="a", task="t", steps=[step], outcome_reward=reward),
            "stepscope",
        )
        for reward in (None, float("nan"), float("inf"))
    }
    assert len(set(hashes.values())) == 3
