"""The selection language's parser (Django-free): names, old names, types, bounds, checks
across filters, and the round trips through storage and the list's query string."""

from __future__ import annotations

from typing import Any

import pytest

from trajectories.models import Step
from trajectories.selection import (
    FILTERS,
    STEP_KINDS,
    SelectionError,
    TrajectoryFilters,
    selection_definition,
    selection_parse,
    selection_query,
    selection_without,
)


def test_step_kinds_are_the_models() -> None:
    assert tuple(Step.Kind.values) == STEP_KINDS


def test_a_query_string_and_json_give_the_same_selection() -> None:
    query = {"q": " refund ", "task": "t1", "min_steps": "3", "min_agreement": "0.5"}
    json = {"q": "refund", "task": "t1", "min_steps": 3, "min_agreement": 0.5}
    assert selection_parse(query) == selection_parse(json)
    assert selection_parse(json) == TrajectoryFilters(
        q="refund", task="t1", min_steps=3, min_agreement=0.5
    )


def test_old_names_answer_to_their_filter() -> None:
    old = {
        "task_key": "t",
        "model_name": "m",
        "search": "s",
        "tool_name": "x",
        "step_kind": "tool_call",
        "error_step": "yes",
        "metadata": "metadata.level = 3",
    }
    assert selection_parse(old) == TrajectoryFilters(
        task="t",
        model="m",
        q="s",
        tool="x",
        kind="tool_call",
        error_steps="yes",
        meta="metadata.level = 3",
    )


def test_a_job_selection_stored_before_the_rename_still_reads() -> None:
    """Runs stored ``dataclasses.asdict`` of the old value: every field, old names."""
    stored: dict[str, Any] = {
        "outcome": "failure",
        "model_name": "",
        "task_key": "arith-11-3",
        "min_steps": None,
        "max_steps": None,
        "label_status": "",
        "min_agreement": None,
        "human_model": "",
        "model_scorer": "",
        "model_threshold": 0.5,
        "first_error": "",
        "credit_run": None,
        "credit_above": None,
        "credit_below": None,
        "search": "",
        "tool_name": "",
        "agent": "",
        "step_kind": "",
        "error_step": "",
        "metadata": "",
    }
    assert selection_parse(stored) == TrajectoryFilters(outcome="failure", task="arith-11-3")


def test_every_unknown_name_is_named_and_paging_names_can_be_passed_over() -> None:
    with pytest.raises(SelectionError) as raised:
        selection_parse({"bogus": "1", "colour": "red", "task": "t", "after": "3"})
    assert raised.value.unknown == ["after", "bogus", "colour"]
    assert "unknown filter" in raised.value.errors["bogus"]
    assert selection_parse({"task": "t", "after": "3"}, ignore={"after"}).task == "t"


@pytest.mark.parametrize(
    ("given", "name", "message"),
    [
        ({"min_steps": "three"}, "min_steps", "expected a whole number"),
        ({"min_steps": 2.5}, "min_steps", "expected a whole number"),
        ({"min_steps": True}, "min_steps", "expected a whole number"),
        ({"min_steps": "-1"}, "min_steps", "below 0"),
        ({"model_threshold": "nan"}, "model_threshold", "finite"),
        ({"min_agreement": 1.5}, "min_agreement", "above 1"),
        ({"outcome": "failed"}, "outcome", "not one of success, failure, unknown"),
        ({"kind": "dance"}, "kind", "not one of message"),
        ({"q": "x" * 501}, "q", "longer than 500"),
        ({"meta": "metadata.level == 3"}, "meta", "operator"),
        ({"task": ["a", "b"]}, "task", "one value"),
        ({"task": 3}, "task", "expected text"),
        ({"human_model": "agree"}, "human_model", "needs model_scorer"),
        ({"credit_below": "0"}, "credit_below", "needs credit_run"),
        ({"min_steps": "5", "max_steps": "2"}, "max_steps", "below min_steps 5"),
        ({"task": "a", "task_key": "b"}, "task_key", "given twice"),
    ],
)
def test_a_bad_value_is_named(given: dict[str, Any], name: str, message: str) -> None:
    with pytest.raises(SelectionError) as raised:
        selection_parse(given)
    assert message in raised.value.errors[name]
    assert raised.value.by_name()[name] == [raised.value.errors[name]]


FULL = TrajectoryFilters(
    q='"a phrase" -word',
    outcome="success",
    model="m",
    task="t",
    min_steps=2,
    max_steps=9,
    tool="search",
    agent="planner",
    kind="tool_call",
    error_steps="no",
    meta="metadata.cost >= 0.5",
    label_status="partial",
    min_agreement=0.75,
    first_error="yes",
    human_model="disagree",
    model_scorer="prm",
    model_threshold=0.25,
    credit_run=7,
    credit_above=0.5,
    credit_below=-1.5,
    policy_version="3..7",
    min_training_step=1,
    max_training_step=9,
    min_advantage=-0.5,
    max_advantage=0.5,
    advantage_disagrees="yes",
    origin="imported",
    label_schema="correctness",
    similar="the agent gave up",
    failure_mode=3,
)
# similar and similar_step exclude each other: the second round-trips on its own.
MORE_LIKE_STEP = TrajectoryFilters(similar_step=42, outcome="failure")


def test_every_filter_round_trips_through_storage_and_the_query_string() -> None:
    assert set(selection_definition(FULL)) == set(FILTERS) - {"similar_step"}
    for filters in (FULL, MORE_LIKE_STEP):
        assert selection_parse(selection_definition(filters)) == filters
        assert selection_parse(selection_query(filters)) == filters
    assert selection_definition(TrajectoryFilters()) == {}
    assert TrajectoryFilters().is_empty() and not FULL.is_empty()


def test_dropping_a_filter_drops_the_ones_that_need_it() -> None:
    kept = selection_without(FULL, ["model_scorer", "credit_run"])
    assert (kept.human_model, kept.model_scorer, kept.credit_run) == ("", "", None)
    assert (kept.credit_above, kept.credit_below, kept.task) == (None, None, "t")
