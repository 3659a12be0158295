"""Typed parameters: a frozen dataclass of defaults (a scorer's ``ScorerParams``, a
judge's ``JudgeParams``, a policy's ``PolicyParams``) filled from the JSON object a user
gave, every value checked against the field's type. The one validator the three share;
each then checks its own ranges and choices.

Plain data in, plain data out: no torch, no Django.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    """The type of each field of dataclass ``cls``, annotations resolved (once)."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}
    return _FIELD_TYPES[cls]


def params_build(
    cls: type[T],
    raw: Mapping[str, Any] | None,
    *,
    noun: str,
    error: type[Exception],
    defaults: Mapping[str, Any] | None = None,
    convert: Mapping[str, Callable[[Any], Any]] | None = None,
) -> T:
    """``cls`` from ``defaults`` overlaid with ``raw``. A name ``cls`` lacks raises
    ``error("unknown <noun> parameter 'name'")``; a value of the wrong type raises
    ``error`` naming the parameter and its type. An int is taken for a float, a bool is
    never taken for an int, ``X | None`` takes null; ``convert`` checks and converts the
    fields whose type is a container (raising ``error`` itself)."""
    fields = _field_types(cls)
    values: dict[str, Any] = dict(defaults or {})
    for name, value in (raw or {}).items():
        if name not in fields:
            raise error(f"unknown {noun} parameter {name!r}")
        if convert and name in convert:
            values[name] = convert[name](value)
        else:
            values[name] = _typed(name, value, fields[name], error)
    return cls(**values)


def _typed(name: str, value: Any, hint: Any, error: type[Exception]) -> Any:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else ()
    nullable = type(None) in options
    expected = next((o for o in options if o is not type(None)), hint) if options else hint
    if value is None and nullable:
        return value
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, expected) and not (expected is int and isinstance(value, bool)):
        return value
    if nullable:
        raise error(f"parameter {name!r} must be {expected.__name__} or null")
    raise error(f"parameter {name!r} must be {expected.__name__}, got {value!r}")


def spec_key(*parts: Any) -> str:
    """A digest of what a loaded model is made from (reference, revision, parameters...):
    the key that tells models in the worker's cache apart."""
    payload = json.dumps(list(parts), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()
