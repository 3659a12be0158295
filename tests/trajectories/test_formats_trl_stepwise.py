"""The TRL stepwise-supervision parser, on records in the shape of ``trl-lib/math_shepherd``
(``prompt``, ``completions``, ``labels``) as JSON Lines, a JSON array and one object."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedLabel, ParsedTrajectory, RecordError
from trajectories.formats.trl_stepwise import parse

PROMPT = (
    "Tony loved to solve difficult pen and paper puzzles. He did a warm-up puzzle that only "
    "took 10 minutes and after that he did 2 puzzles that each took 3 times as long. How "
    "long did he spend solving puzzles?"
)
COMPLETIONS = [
    "Step 1: He spent 10 minutes on the warm-up puzzle.",
    "Step 2: Each of the other puzzles took 10 * 3 = 30 minutes.",
    "Step 3: So he spent 10 + 30 = 40 minutes in total. The answer is: 40",
]


def example(**change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "prompt": PROMPT,
        "completions": list(COMPLETIONS),
        "labels": [True, True, False],
    }
    record.update(change)
    return record


def compact_digest(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_lines(path: Path, lines: list[Any]) -> Path:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def test_registered_under_its_format_name() -> None:
    assert parser_for("trl-stepwise") is parse


def test_completions_become_steps_and_labels_imported_labels(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "trl.jsonl", [example()])

    [trajectory] = list(parse(path))

    assert isinstance(trajectory, ParsedTrajectory)
    assert trajectory.task == PROMPT
    assert [step.content for step in trajectory.steps] == COMPLETIONS
    assert all(s.kind == "thought" and s.labelable for s in trajectory.steps)
    assert trajectory.labels == [
        ParsedLabel(step_index=0, value=1, annotator="import:trl-stepwise"),
        ParsedLabel(step_index=1, value=1, annotator="import:trl-stepwise"),
        ParsedLabel(step_index=2, value=-1, annotator="import:trl-stepwise"),
    ]
    assert trajectory.first_error_index == 2
    # Without an id, the record is named by a hash of its prompt and steps.
    assert trajectory.external_id == "trl-" + compact_digest([PROMPT, COMPLETIONS])
    assert trajectory.task_key == "trl-" + compact_digest(PROMPT)
    assert trajectory.metadata == {}
    assert trajectory.location == "line 1"


def test_all_true_labels_mean_no_error_and_extra_keys_are_metadata(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "trl.jsonl", [example(labels=[True] * 3, id=17, source="math_shepherd")]
    )

    [trajectory] = list(parse(path))

    assert isinstance(trajectory, ParsedTrajectory)
    assert trajectory.first_error_index == -1
    assert trajectory.external_id == "17"
    assert trajectory.metadata == {"id": 17, "source": "math_shepherd"}


def test_json_array_and_single_object_files(tmp_path: Path) -> None:
    array = tmp_path / "trl.json"
    array.write_text(json.dumps([example(), example(prompt="Another")], indent=2))
    single = tmp_path / "one.json"
    single.write_text(json.dumps(example(), indent=2))

    from_array = list(parse(array))
    [from_single] = list(parse(single))

    assert [r.location for r in from_array if isinstance(r, ParsedTrajectory)] == [
        "record 0",
        "record 1",
    ]
    assert isinstance(from_single, ParsedTrajectory)
    assert from_single.location == "record 0"
    assert from_single.steps == from_array[0].steps  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"prompt": None}, "prompt", "expected str"),
        ({"completions": "Step 1"}, "completions", "expected list, got str"),
        ({"completions": [], "labels": []}, "completions", "is empty"),
        ({"completions": ["a", 2, "c"]}, "completions.1", "expected str, got int"),
        ({"labels": [True, False]}, "labels", "has 2 labels for 3 completions"),
        ({"labels": [True, 1, False]}, "labels.1", "expected bool, got int"),
        ({"labels": None}, "labels", "expected list"),
        ({"id": [1]}, "id", "expected str or int"),
        ({"id": " "}, "id", "is empty"),
    ],
)
def test_malformed_record_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = tmp_path / "trl.json"
    path.write_text(json.dumps([example(id="a"), example(**change), example(id="c")]))

    results = list(parse(path))

    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 1", field)
    assert message in error.message
    assert [r.external_id for r in results if isinstance(r, ParsedTrajectory)] == ["a", "c"]


def test_truncated_array_is_a_file_error_naming_the_record(tmp_path: Path) -> None:
    path = tmp_path / "trl.json"
    path.write_text(json.dumps([example(), example()])[:-30])

    with pytest.raises(FileError, match=r"trl\.json: not valid JSON at record 1: "):
        list(parse(path))
