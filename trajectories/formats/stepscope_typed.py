"""A fast reader for the usual API push: a JSON body whose trajectories are all
well-formed Stepscope records without labels (no Django).

An API push of 500 trajectories spent more time turning its JSON into checked records
(decoding it into dicts, then checking every field of every step) than PostgreSQL spent
storing them. msgspec decodes and type-checks the body in one pass, from the bytes, into
the typed records below, about four times faster. Those types accept no more than
:mod:`trajectories.formats.stepscope` does; the few checks they cannot say (an id of
spaces) are made after. Whatever the typed reader does not take whole (a bad record, a
label, a decisive failure, a field it does not know) it hands back as None, and the body
is read the ordinary way, so errors and everything else are the ordinary parser's: a
body it takes gives exactly the trajectories the ordinary parser would.
``tests/trajectories/test_stepscope_typed.py`` holds it to that.
"""

# Django-free: computation on plain data.
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

import msgspec

from trajectories.formats.base import ParsedStep, ParsedTrajectory

# STEP_KINDS, spelled out for the type checker and msgspec (the test checks they agree).
StepKind = Literal[
    "message", "thought", "action", "tool_call", "tool_result", "observation", "answer"
]

# Fields that carry labels or verdicts: the typed reader takes only their empty forms
# (no labels, null), and anything else goes to the ordinary parser, which checks them.
_NoLabels = Annotated[list[Any], msgspec.Meta(max_length=0)]

# The structs are untracked by the garbage collector (gc=False): a push makes tens of
# thousands of them, which set off collections, and decoded JSON cannot hold a cycle.


class _Step(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    kind: StepKind = "message"
    role: str = "assistant"
    content: str
    # Absent: the role decides (an assistant's step is labelable).
    labelable: bool | msgspec.UnsetType = msgspec.UNSET
    agent: str = ""
    tool_name: str = ""
    tool_args: Any = None
    metadata: dict[str, Any] = {}
    # Training facts go to the ordinary parser, which checks them; null is none.
    training: None = None
    labels: _NoLabels = []


class _Outcome(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    # An integer reward is read as a float, as the ordinary parser does.
    reward: float | None = None
    success: bool | None = None


class _Record(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    id: str
    task: str
    task_key: str = ""
    ground_truth: str = ""
    model: str = ""
    outcome: _Outcome = _Outcome()
    first_error_index: None = None
    decisive: None = None
    metadata: dict[str, Any] = {}
    training: None = None
    steps: Annotated[list[_Step], msgspec.Meta(min_length=1)]


class _Push(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    # The request's own fields are checked by the API's serializer, as for any body.
    project: Any = msgspec.UNSET
    format: Any = msgspec.UNSET
    skip_invalid: Any = msgspec.UNSET
    trajectories: list[_Record]


class TypedRecords:
    """A push's records, decoded and checked; :meth:`parsed` gives them as the ordinary
    parser's ``parse_records`` would, one at a time, once.

    Read once, because the request holds this object long after the import: DRF's
    request and view refer to each other, so what a request parsed is freed only by a
    full garbage collection. Holding a push's records (ten thousand tracked metadata
    dicts in a push of 500) until then made one request in four or five pay 12-18 ms
    for that collection (gunicorn, ``bench/push.py``); handed on to the reading, they are
    freed when the import has read them all."""

    def __init__(self, records: list[_Record]) -> None:
        self._records = records
        self._count = len(records)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[ParsedTrajectory]:
        return self.parsed()

    def parsed(self) -> Iterator[ParsedTrajectory]:
        records, self._records = self._records, []
        for index, record in enumerate(records):
            outcome = record.outcome
            yield ParsedTrajectory(
                external_id=record.id,
                task=record.task,
                steps=[
                    ParsedStep(
                        step.kind,
                        step.role,
                        step.content,
                        step.role == "assistant"
                        if step.labelable is msgspec.UNSET
                        else step.labelable,
                        step.agent,
                        step.tool_name,
                        step.tool_args,
                        step.metadata,
                    )
                    for step in record.steps
                ],
                task_key=record.task_key,
                ground_truth=record.ground_truth,
                model_name=record.model,
                outcome_reward=outcome.reward,
                success=outcome.success,
                metadata=record.metadata,
                location=f"record {index}",
            )


_DECODER = msgspec.json.Decoder(_Push)


def push_decode(body: bytes) -> tuple[dict[str, Any], TypedRecords] | None:
    """The body's own fields (those it has of ``project``, ``format``, ``skip_invalid``)
    and its records, or None when the typed reader does not take the body whole."""
    try:
        push = _DECODER.decode(body)
    # Malformed, not UTF-8 (a UnicodeDecodeError), too deep, or not in the typed shape.
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    if not push.trajectories:
        return None
    for record in push.trajectories:
        if not record.id.strip():
            return None  # the ordinary parser says the id is empty
    fields = {
        name: value
        for name in ("project", "format", "skip_invalid")
        if (value := getattr(push, name)) is not msgspec.UNSET
    }
    return fields, TypedRecords(push.trajectories)
