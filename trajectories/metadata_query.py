"""Conditions on a trajectory's metadata as the list's filter box takes them:
``metadata.level = 3``, ``metadata.cost >= 0.5``, ``metadata.env != "retail"``, several
separated by commas. Parsed here into plain data; ``trajectories.selectors`` turns each
into SQL on the ``metadata`` JSONB column.

A condition is ``PATH OP VALUE``. ``PATH`` is dotted keys, with or without the leading
``metadata.`` (``usage.tokens.input`` reads ``metadata['usage']['tokens']['input']``).
``OP`` is one of ``= != < <= > >=``; the order comparisons need a number and compare only
metadata values that are numbers. ``VALUE`` is a number, ``true``, ``false``, ``null``, a
double-quoted string (``\\"`` and ``\\\\`` inside), or a bare word taken as a string.
"""

# Django-free: plain data in, plain data out; the form, the API and selections share it.
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

OPERATORS = ("<=", ">=", "!=", "=", "<", ">")
ORDER_OPERATORS = frozenset({"<", "<=", ">", ">="})
MAX_CONDITIONS = 20
MAX_DEPTH = 8
_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_CONDITION = re.compile(
    r"^\s*(?P<path>[^\s=!<>\"]+)\s*(?P<op><=|>=|!=|=|<|>)\s*(?P<value>.*?)\s*$", re.DOTALL
)
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_BARE = re.compile(r"^[^\s\",=!<>]+$")

Scalar = float | str | bool | None


class MetadataSyntaxError(ValueError):
    """A condition that does not parse; the message quotes it and says what was expected."""


@dataclass(frozen=True)
class MetadataCondition:
    path: tuple[str, ...]
    op: str
    value: Scalar

    def json_value(self) -> str:
        """The value as JSON text, for a comparison with a ``jsonb`` value."""
        return json.dumps(self.value)


def metadata_conditions_parse(text: str) -> list[MetadataCondition]:
    """Every condition in ``text`` (comma-separated; commas inside quotes are text)."""
    conditions = [condition_parse(part) for part in _split(text) if part.strip()]
    if len(conditions) > MAX_CONDITIONS:
        raise MetadataSyntaxError(f"at most {MAX_CONDITIONS} metadata conditions")
    return conditions


def condition_parse(text: str) -> MetadataCondition:
    match = _CONDITION.match(text)
    if match is None:
        raise MetadataSyntaxError(
            f"{text.strip()!r} is not a condition; write it as key OP value, e.g."
            " metadata.level = 3 or metadata.cost >= 0.5 (OP is one of = != < <= > >=)"
        )
    path = _path(match["path"], text)
    op, raw = match["op"], match["value"]
    if raw[:1] in ("=", "<", ">", "!"):
        raise MetadataSyntaxError(
            f"{text.strip()!r}: use one operator, one of = != < <= > >= (not {op}{raw[0]})"
        )
    value = _value(raw, text)
    if op in ORDER_OPERATORS and not isinstance(value, float):
        raise MetadataSyntaxError(f"{text.strip()!r}: {op} compares numbers; {raw!r} is not one")
    return MetadataCondition(path=path, op=op, value=value)


def condition_text(condition: MetadataCondition) -> str:
    """The condition written back in the syntax ``condition_parse`` reads."""
    value = condition.value
    if isinstance(value, float):
        shown = str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    else:
        shown = json.dumps(value)
    return f"metadata.{'.'.join(condition.path)} {condition.op} {shown}"


def _split(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _path(raw: str, text: str) -> tuple[str, ...]:
    keys = raw.split(".")
    if keys[0] == "metadata":
        keys = keys[1:]
    if not keys or len(keys) > MAX_DEPTH or not all(_KEY.fullmatch(key) for key in keys):
        raise MetadataSyntaxError(
            f"{text.strip()!r}: {raw!r} is not a metadata key; use dotted names of letters,"
            f" digits, _ and - (at most {MAX_DEPTH} deep), e.g. metadata.usage.cost"
        )
    return tuple(keys)


def _value(raw: str, text: str) -> Scalar:
    if not raw:
        raise MetadataSyntaxError(f"{text.strip()!r} has no value after the operator")
    if raw.startswith('"'):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, str):
            raise MetadataSyntaxError(f"{text.strip()!r}: {raw} is not a closed quoted string")
        return value
    if _NUMBER.match(raw):
        number = float(raw)
        if not math.isfinite(number):
            raise MetadataSyntaxError(f"{text.strip()!r}: {raw} is too large")
        return number
    if raw in ("true", "false"):
        return raw == "true"
    if raw == "null":
        return None
    if _BARE.match(raw):
        return raw
    raise MetadataSyntaxError(
        f"{text.strip()!r}: {raw!r} is not a value; quote text that has spaces or"
        ' punctuation ("like this")'
    )
