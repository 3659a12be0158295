"""Encoding rows for PostgreSQL ``COPY ... FROM STDIN`` in text format (no Django).

Building the text ourselves, column by column, is several times faster than handing
each row to the driver's per-value adapters, and lets JSON columns be serialised once.
"""

# Django-free: the helper process encodes rows without a database.
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import orjson

from trajectories.formats.base import ParsedStep, StepTraining

NULL = "\\N"


class Json:
    """Marks a value for a json/jsonb column."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def text(value: str) -> str:
    # Most values need no escaping; testing for the four characters is much cheaper
    # than escaping every string.
    if "\\" in value or "\n" in value or "\t" in value or "\r" in value:
        # Four C-level replaces run about twenty times faster than str.translate with
        # a mapping, which looks every character up in a dict; JSON text of a source
        # record (full of escaped newlines) made that the largest cost of an import.
        # Backslashes go first so the ones added after are not doubled.
        value = (
            value.replace("\\", "\\\\")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
        )
    if "\x00" in value:
        raise ValueError("text contains a NUL character, which PostgreSQL cannot store")
    if not value.isascii():
        value.encode("utf-8")  # raises UnicodeEncodeError (a ValueError) on lone surrogates
    return value


def json_text(value: Any) -> str:
    if value is None:
        return NULL
    if value == {} and isinstance(value, dict):
        return "{}"
    if value == [] and isinstance(value, list):
        return "[]"
    try:
        # orjson encodes several times faster than json.dumps, and source records
        # (whole runs) are a large part of what some imports write.
        encoded = orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits, non-string keys, lone surrogates
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False)
    else:
        # orjson writes NaN and infinities as null; PostgreSQL cannot store them, and
        # data must not change on the way in, so they stay an error as with json.dumps.
        if "null" in encoded and not _finite(value):
            raise ValueError("JSON cannot hold NaN or infinity")
    if "\\u0000" in encoded:
        raise ValueError("JSON contains a NUL character, which PostgreSQL's jsonb cannot store")
    return text(encoded)


def _finite(value: Any) -> bool:
    """Whether no float anywhere in ``value`` is NaN or infinite."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return False
    return True


def field(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, str):
        return text(value)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Json):
        return json_text(value.value)
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    raise TypeError(f"cannot COPY a {type(value).__name__}")


def row(values: tuple[Any, ...]) -> str:
    return "\t".join([field(v) for v in values]) + "\n"


# The column order step_rows writes. The step id is left to the column's default, so
# an import need not fetch ids first; the trajectory id comes first so it can be filled
# in last (:func:`first_column_filled`). The parts that repeat from step to step (kind,
# role, agent, tool name, flags) sit together so they can be encoded once, and so do
# the training facts, which most steps lack.
STEP_COLUMNS = (
    "trajectory_id, index, prefix_hash, kind, role, agent, tool_name, labelable,"
    " tool_args, metadata, policy_version, training_step, logprob_sum, logprob_mean,"
    " logprob_min, advantage, returns, token_logprobs, content"
)


def step_rows(steps: Sequence[ParsedStep], hashes: Sequence[str], first: int = 0) -> str:
    """One trajectory's rows for ``COPY trajectories_step (STEP_COLUMNS)`` as one
    string, each row without its first column (the trajectory id, not known yet): every
    line starts with the tab that follows it. Indexes start at ``first`` (steps
    appended to a trajectory).

    Steps are most of what an import writes, so this is the hot loop: the columns that
    repeat (kind, role, agent, tool name, labelable) are escaped once and remembered,
    and so are the empty-argument, empty-metadata cases. Raises ValueError for text
    PostgreSQL cannot store.
    """
    rows = []
    for index, step in enumerate(steps):
        key = (step.kind, step.role, step.agent, step.tool_name, step.labelable)
        middle = _MIDDLES.get(key)
        if middle is None:
            middle = "\t".join(
                [text(step.kind), text(step.role), text(step.agent), text(step.tool_name)]
            ) + ("\tt\t" if step.labelable else "\tf\t")
            if len(_MIDDLES) < _REMEMBERED:
                _MIDDLES[key] = middle
        tool_args, metadata = step.tool_args, step.metadata
        values = (
            _NO_VALUES
            if tool_args is None and not metadata
            else f"{json_text(tool_args)}\t{json_text(metadata)}\t"
        )
        training = step.training
        facts = _NO_TRAINING if training is None else training_text(training)
        rows.append(
            f"\t{first + index}\t{hashes[index]}\t{middle}{values}{facts}{text(step.content)}\n"
        )
    return "".join(rows)


def training_text(training: StepTraining) -> str:
    """The step's training-fact columns of :data:`STEP_COLUMNS`, each followed by a tab."""
    values = (
        # Blank, not NULL, for an unknown version (the column is a Django text field).
        training.policy_version or "",
        training.training_step,
        training.logprob_sum,
        training.logprob_mean,
        training.logprob_min,
        training.advantage,
        training.returns,
        None if training.token_logprobs is None else Json(training.token_logprobs),
    )
    return "".join([field(value) + "\t" for value in values])


def first_column_filled(rows: bytes, value: int) -> bytes:
    """``rows`` (encoded COPY lines, each starting with the tab after an empty first
    column) with ``value`` as every line's first column. Newlines inside values are
    escaped in COPY text, so each newline ends a row and one replace fills them all.

    The importing process does this for every trajectory, so it is bytes (three times
    faster to replace in than text) and a one-byte pattern: replacing "\\n\\t" instead
    took four times as long."""
    if not rows:
        return rows
    first = b"%d" % value
    return first + rows[:-1].replace(b"\n", b"\n" + first) + b"\n"


# Escaped repeating columns, bounded so that a file with many distinct agents or tool
# names cannot grow them without end.
_REMEMBERED = 4096
_MIDDLES: dict[tuple[str, str, str, str, bool], str] = {}
_NO_VALUES = f"{NULL}\t{{}}\t"
_NO_TRAINING = "\t" + f"{NULL}\t" * 7
