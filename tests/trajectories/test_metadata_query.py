"""The metadata conditions of the trajectory filters, parsed without a database."""

from __future__ import annotations

import pytest

from trajectories.metadata_query import (
    MetadataCondition,
    MetadataSyntaxError,
    condition_text,
    metadata_conditions_parse,
)


def test_conditions_parse_with_and_without_the_prefix() -> None:
    assert metadata_conditions_parse(
        'metadata.level = 3, cost >= 0.5, usage.tokens.input < 1e3, env != "a, b", ok = true,'
        " name = gpt-4o, gone = null"
    ) == [
        MetadataCondition(("level",), "=", 3.0),
        MetadataCondition(("cost",), ">=", 0.5),
        MetadataCondition(("usage", "tokens", "input"), "<", 1000.0),
        MetadataCondition(("env",), "!=", "a, b"),
        MetadataCondition(("ok",), "=", True),
        MetadataCondition(("name",), "=", "gpt-4o"),
        MetadataCondition(("gone",), "=", None),
    ]
    assert metadata_conditions_parse("  ") == []


@pytest.mark.parametrize(
    "text",
    ["metadata.level = 3", "cost >= 0.5", 'env != "a \\"quoted\\" b"', "x.y <= -2.5", "f = false"],
)
def test_a_condition_reads_back_from_its_text(text: str) -> None:
    [condition] = metadata_conditions_parse(text)
    assert metadata_conditions_parse(condition_text(condition)) == [condition]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metadata.level == 3", "use one operator"),
        ("metadata.level", "is not a condition"),
        ("metadata.cost >= cheap", ">= compares numbers"),
        ("metadata. = 3", "is not a metadata key"),
        ("metadata.a$b = 3", "is not a metadata key"),
        ('env = "open', "not a closed quoted string"),
        ("env = two words", "is not a value"),
        ("level =", "has no value after the operator"),
        ("level = 1e999", "too large"),
        (", ".join(["a = 1"] * 21), "at most 20"),
    ],
)
def test_a_bad_condition_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(MetadataSyntaxError, match=message):
        metadata_conditions_parse(text)
