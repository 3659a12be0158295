"""The Math-Shepherd parser, on records built in the shape of the released dataset
(``peiyi9979/Math-Shepherd``: ``input`` with ``ки`` step tags, ``label`` with ``+``/``-``
in their place, and ``task``), since no real file is on this disk."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedLabel, ParsedTrajectory, RecordError
from trajectories.formats.math_shepherd import parse

GSM8K_PROBLEM = (
    "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and "
    "bakes muffins for her friends every day with four. She sells the remainder at the "
    "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make "
    "every day at the farmers' market?"
)
GSM8K_STEPS = [
    "Step 1: Janet's ducks lay 16 eggs per day, so she has 16 - 3 - 4 = <<16-3-4=9>>9 eggs left.",
    "Step 2: She sells them for $2 each, so she makes 9 * $2 = $<<9*2=18>>18 every day. "
    "The answer is: 18",
]
MATH_PROBLEM = "If $x + 2 = 5$, what is $x - 1$?"
MATH_STEPS = [
    "Step 1: Subtracting 2 from both sides gives $x = 3$.",
    "Step 2: Then $x - 1 = 3 - 1 = 1$.",
    "Step 3: The answer is: 1",
]


def shepherd(
    problem: str, steps: list[str], tags: str, task: str | None = "GSM8K"
) -> dict[str, Any]:
    """A record as Math-Shepherd writes it: the problem, a space, then each step
    followed by " ки" and a newline between steps."""
    text = problem + " " + "\n".join(f"{step} ки" for step in steps)
    label = (
        problem + " " + "\n".join(f"{step} {tag}" for step, tag in zip(steps, tags, strict=True))
    )
    record = {"input": text, "label": label}
    if task is not None:
        record["task"] = task
    return record


def gsm8k(**change: Any) -> dict[str, Any]:
    return {**shepherd(GSM8K_PROBLEM, GSM8K_STEPS, "++"), **change}


def write_lines(path: Path, lines: list[Any]) -> Path:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def only_trajectory(path: Path) -> ParsedTrajectory:
    [result] = list(parse(path))
    assert isinstance(result, ParsedTrajectory), result
    return result


def test_registered_under_its_format_name() -> None:
    assert parser_for("math-shepherd") is parse


def test_steps_split_at_the_tags_and_problem_before_step_1(tmp_path: Path) -> None:
    source = gsm8k()
    trajectory = only_trajectory(write_lines(tmp_path / "ms.jsonl", [source]))

    assert trajectory.task == GSM8K_PROBLEM
    assert [step.content for step in trajectory.steps] == GSM8K_STEPS
    assert all(
        s.kind == "thought" and s.role == "assistant" and s.labelable for s in trajectory.steps
    )
    assert trajectory.labels == [
        ParsedLabel(step_index=0, value=1, annotator="import:math-shepherd"),
        ParsedLabel(step_index=1, value=1, annotator="import:math-shepherd"),
    ]
    assert trajectory.first_error_index == -1
    assert trajectory.metadata == {"task": "GSM8K"}
    assert (
        trajectory.external_id == "ms-" + hashlib.sha256(source["input"].encode()).hexdigest()[:16]
    )
    assert trajectory.task_key == "ms-" + hashlib.sha256(GSM8K_PROBLEM.encode()).hexdigest()[:16]
    assert trajectory.raw == source
    assert trajectory.location == "line 1"


def test_plus_and_minus_inside_the_maths_are_not_tags(tmp_path: Path) -> None:
    source = shepherd(MATH_PROBLEM, MATH_STEPS, "+--", task="MATH")
    trajectory = only_trajectory(write_lines(tmp_path / "ms.jsonl", [source]))

    assert trajectory.task == MATH_PROBLEM
    assert [step.content for step in trajectory.steps] == MATH_STEPS
    assert [(lab.step_index, lab.value) for lab in trajectory.labels] == [(0, 1), (1, -1), (2, -1)]
    assert trajectory.first_error_index == 1


def test_without_step_1_the_first_line_is_the_problem(tmp_path: Path) -> None:
    source = {
        "input": "What is 6 * 7?\n6 * 7 = 42. ки\nThe answer is 42. ки",
        "label": "What is 6 * 7?\n6 * 7 = 42. +\nThe answer is 42. -",
    }
    trajectory = only_trajectory(write_lines(tmp_path / "ms.jsonl", [source]))

    assert trajectory.task == "What is 6 * 7?"
    assert [step.content for step in trajectory.steps] == ["6 * 7 = 42.", "The answer is 42."]
    assert [lab.value for lab in trajectory.labels] == [1, -1]
    assert trajectory.metadata == {}


def test_json_array_of_records_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "ms.json"
    path.write_text(json.dumps([gsm8k(), shepherd(MATH_PROBLEM, MATH_STEPS, "+++")]))

    results = list(parse(path))

    assert [r.location for r in results if isinstance(r, ParsedTrajectory)] == [
        "record 0",
        "record 1",
    ]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"input": 5}, "input", "expected str, got int"),
        ({"label": None}, "label", "expected str"),
        ({"input": "What is 1 + 1? Step 1: 2", "label": "x"}, "input", "has no ки step tag"),
        (
            {"input": GSM8K_PROBLEM + " Step 1: 2 ки and more", "label": "x"},
            "input",
            "text after the last",
        ),
        ({"input": "Step 1: 2 ки", "label": "Step 1: 2 +"}, "input", "no problem text"),
        ({"input": "no line break 2 ки", "label": "no line break 2 +"}, "input", "no 'Step 1:'"),
        ({"input": "Q? Step 1: a ки ки", "label": "Q? Step 1: a + +"}, "input", "step 1 is empty"),
        (
            {"label": gsm8k()["label"].replace("Janet's", "Jane's")},
            "label",
            "does not match input before step 0",
        ),
        ({"label": gsm8k()["label"][:-1] + "?"}, "label", "has '?' where step 1's tag is"),
        ({"label": gsm8k()["label"][:-1]}, "label", "has '' where step 1's tag is"),
        ({"label": gsm8k()["label"] + " extra"}, "label", "has text after the last tag"),
    ],
)
def test_malformed_record_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = write_lines(
        tmp_path / "ms.jsonl",
        [gsm8k(task="a"), gsm8k(**change), shepherd(MATH_PROBLEM, MATH_STEPS, "+++", task="c")],
    )

    results = list(parse(path))

    assert len(results) == 3
    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("line 2", field)
    assert message in error.message
    assert [r.metadata["task"] for r in results if isinstance(r, ParsedTrajectory)] == ["a", "c"]


def test_non_object_line_is_a_record_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "ms.jsonl", [gsm8k(), "42", "", "{broken"])

    first, number, broken = list(parse(path))

    assert isinstance(first, ParsedTrajectory)
    assert number == RecordError("line 2", "", "expected an object, got int")
    assert isinstance(broken, RecordError)
    assert (broken.location, broken.field) == ("line 4", "")


def test_first_line_not_json_is_a_file_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "ms.jsonl", ['{"input": "x" "label": "y"}', gsm8k()])

    with pytest.raises(FileError, match=r"ms\.jsonl: not valid JSON"):
        list(parse(path))
