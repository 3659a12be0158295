"""Trajectory metadata (``jsonb``) in SQL: the filter box's conditions
(``trajectories.metadata_query`` parses them) and a number read from a key."""

from __future__ import annotations

from typing import Any

from django.db.models import Case, CharField, F, FloatField, Func, JSONField, Q, Value, When
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast
from django.db.models.lookups import (
    Exact,
    GreaterThan,
    GreaterThanOrEqual,
    IsNull,
    LessThan,
    LessThanOrEqual,
)

from trajectories.metadata_query import MetadataCondition


def metadata_key(*path: str) -> Any:
    """``metadata -> path[0] -> path[1] ...`` (any key names: no ORM lookup is parsed
    from them)."""
    value: Any = F("metadata")
    for key in path:
        value = KeyTransform(key, value)
    return value


_ORDER_LOOKUPS = {"<": LessThan, "<=": LessThanOrEqual, ">": GreaterThan, ">=": GreaterThanOrEqual}


def metadata_condition_q(condition: MetadataCondition) -> Q:
    """One metadata condition as SQL on ``metadata`` (``jsonb``). Equality compares JSON
    values (3 equals 3.0; "3" is text); ``!=`` needs the key present; the order
    comparisons read numbers only, so a key holding text or nothing is never in range."""
    value = metadata_key(*condition.path)
    if condition.op in _ORDER_LOOKUPS:
        return Q(_ORDER_LOOKUPS[condition.op](json_number(value), condition.value))
    same: Exact[Any] = Exact(value, Cast(Value(condition.json_value()), JSONField()))
    if condition.op == "=":
        return Q(same) & _containing(condition)
    return Q(IsNull(value, False)) & ~Q(same)


def _containing(condition: MetadataCondition) -> Q:
    """An equality's condition again as containment (``metadata @> {"a": {"b": 3}}``),
    which the trajectory table's GIN index answers; the equality beside it keeps the
    meaning exact (containment is looser for arrays, and compares numbers as equality
    does). Nothing where the path steps into an array: a whole-number key is an index
    there (``KeyTransform``), which containment of an object cannot say."""
    document: Any = condition.value
    for key in reversed(condition.path):
        try:
            int(key)
        except ValueError:
            document = {key: document}
        else:
            return Q()
    return Q(metadata__contains=document)


def json_number(value: Any) -> Case:
    """A ``jsonb`` value as a float where it is a JSON number, else NULL (never a cast
    error on text)."""
    return Case(
        When(
            Exact(Func(value, function="jsonb_typeof", output_field=CharField()), "number"),
            then=Cast(Func(value, template="(%(expressions)s #>> '{}')"), FloatField()),
        ),
        output_field=FloatField(),
    )
