"""The mapped importer's values: reading a dotted path in a record, and coercing what is
there where the meaning is plain (docs/formats.md, *Values*). Errors are FieldErrors
naming the path."""

from __future__ import annotations

import math
import re
from typing import Any

from trajectories.formats import jsonstream
from trajectories.formats.base import FieldError

INTEGER = re.compile(r"-?\d+")
NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
OUTCOME_WORDS = {"true": True, "false": False, "1": True, "0": False}
# What is missing from a record, as opposed to a JSON null.
MISSING = jsonstream.MISSING


def get(value: Any, path: str) -> Any:
    """The value at a dotted path, or MISSING."""
    for key in path.split("."):
        if isinstance(value, dict):
            if key not in value:
                return MISSING
            value = value[key]
        elif isinstance(value, list) and INTEGER.fullmatch(key):
            index = int(key)
            if not -len(value) <= index < len(value):
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def text(
    record: dict[str, Any],
    path: str,
    *,
    required: bool = False,
    nullable: bool = False,
    prefix: str = "",
) -> str:
    """Text at ``path``: a string, or a number written out. An unmapped, missing or null
    optional field is ``""``."""
    if not path:
        return ""
    name = f"{prefix}.{path}" if prefix else path
    value = get(record, path)
    if value is MISSING:
        if required:
            raise FieldError(name, "is missing")
        return ""
    if value is None:
        if required and not nullable:
            raise FieldError(name, "is null")
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise FieldError(name, f"expected text, got {type_name(value)}")


def first_error_index(record: dict[str, Any], path: str, step_count: int) -> int | None:
    if not path:
        return None
    value = get(record, path)
    if value is MISSING or value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        index = value
    elif isinstance(value, float) and value.is_integer():
        index = int(value)
    elif isinstance(value, str) and INTEGER.fullmatch(value.strip()):
        index = int(value.strip())
    else:
        raise FieldError(path, f"expected a step index, got {describe(value)}")
    if not -1 <= index < step_count:
        raise FieldError(
            path,
            f"is {index}; expected -1 (no error) or a step index from 0 to {step_count - 1}",
        )
    return index


def outcome(record: dict[str, Any], path: str) -> bool | None:
    if not path:
        return None
    value = get(record, path)
    if value is MISSING or value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in OUTCOME_WORDS:
        return OUTCOME_WORDS[value.strip().lower()]
    raise FieldError(path, f"expected true/false or 1/0, got {describe(value)}")


def reward(record: dict[str, Any], path: str) -> float | None:
    if not path:
        return None
    value = get(record, path)
    if value is MISSING or value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and NUMBER.fullmatch(value.strip()):
        number = float(value.strip())
        if math.isfinite(number):
            return number
    raise FieldError(path, f"expected a number, got {describe(value)}")


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:40]!r}..."
    return type_name(value)
