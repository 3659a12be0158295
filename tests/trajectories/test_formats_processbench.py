"""The ProcessBench parser on the real GSM8K split, and on small broken files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import (
    FileError,
    ParsedLabel,
    ParsedStep,
    ParsedTrajectory,
    RecordError,
)
from trajectories.formats.processbench import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
GSM8K = REPO_ROOT.parent / "shared" / "realdata" / "processbench" / "gsm8k.json"


def item(**change: Any) -> dict[str, Any]:
    record = {
        "id": "gsm8k-x",
        "generator": "Qwen2-7B-Instruct",
        "problem": "What is 2 + 3 * 4?",
        "steps": ["3 * 4 = 12.", "2 + 12 = 15.", "The answer is 15."],
        "final_answer_correct": False,
        "label": 1,
    }
    record.update(change)
    return record


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def gsm8k() -> list[ParsedTrajectory]:
    results = list(parse(GSM8K))
    assert [r for r in results if isinstance(r, RecordError)] == []
    return [r for r in results if isinstance(r, ParsedTrajectory)]


def test_registered_under_its_format_name() -> None:
    assert parser_for("processbench") is parse


def test_real_file_counts(gsm8k: list[ParsedTrajectory]) -> None:
    assert len(gsm8k) == 400
    assert sum(len(t.steps) for t in gsm8k) == 2082
    assert (
        sum(1 for t in gsm8k if t.first_error_index is not None and t.first_error_index >= 0) == 207
    )
    assert sum(1 for t in gsm8k if t.first_error_index == -1) == 193
    assert sum(1 for t in gsm8k if t.success) == 200
    assert len({t.model_name for t in gsm8k}) == 12
    assert len({t.external_id for t in gsm8k}) == 400


def test_real_file_maps_steps_and_labels(gsm8k: list[ParsedTrajectory]) -> None:
    source = json.loads(GSM8K.read_text(encoding="utf-8"))
    for trajectory, record in zip(gsm8k, source, strict=True):
        assert trajectory.external_id == record["id"]
        assert trajectory.task == record["problem"]
        assert trajectory.model_name == record["generator"]
        assert [step.content for step in trajectory.steps] == record["steps"]
        assert trajectory.success is record["final_answer_correct"]
        assert trajectory.outcome_reward == (1.0 if record["final_answer_correct"] else 0.0)
        assert trajectory.first_error_index == record["label"]
        assert trajectory.raw == record
        label = record["label"]
        expected = [1] * len(record["steps"]) if label == -1 else [1] * label + [-1]
        assert [lab.value for lab in trajectory.labels] == expected
        assert [lab.step_index for lab in trajectory.labels] == list(range(len(expected)))
    assert gsm8k[3].location == "record 3"


def test_real_file_groups_identical_problems(gsm8k: list[ParsedTrajectory]) -> None:
    by_problem: dict[str, set[str]] = {}
    for trajectory in gsm8k:
        by_problem.setdefault(trajectory.task, set()).add(trajectory.task_key)
    assert len(by_problem) == 375
    assert all(len(keys) == 1 for keys in by_problem.values())
    assert len({t.task_key for t in gsm8k}) == 375


def test_item_with_an_error_labels_up_to_the_first_error(tmp_path: Path) -> None:
    path = write_json(tmp_path / "pb.json", [item()])

    [trajectory] = list(parse(path))

    assert isinstance(trajectory, ParsedTrajectory)
    assert trajectory.task_key == "pb-" + hashlib.sha256(b"What is 2 + 3 * 4?").hexdigest()[:16]
    assert trajectory.steps[0] == ParsedStep(
        kind="thought", role="assistant", content="3 * 4 = 12.", labelable=True
    )
    assert trajectory.first_error_index == 1
    assert (trajectory.success, trajectory.outcome_reward) == (False, 0.0)
    assert trajectory.labels == [
        ParsedLabel(step_index=0, value=1, annotator="import:processbench"),
        ParsedLabel(step_index=1, value=-1, annotator="import:processbench"),
    ]


def test_item_without_an_error_labels_every_step_correct(tmp_path: Path) -> None:
    path = write_json(tmp_path / "pb.json", [item(label=-1, final_answer_correct=True)])

    [trajectory] = list(parse(path))

    assert isinstance(trajectory, ParsedTrajectory)
    assert trajectory.first_error_index == -1
    assert (trajectory.success, trajectory.outcome_reward) == (True, 1.0)
    assert [(lab.step_index, lab.value) for lab in trajectory.labels] == [(0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"steps": "3 * 4 = 12."}, "steps", "expected list, got str"),
        ({"steps": []}, "steps", "is empty"),
        ({"steps": ["ok", 12]}, "steps.1", "expected str, got int"),
        ({"label": 3}, "label", "from 0 to 2"),
        ({"label": -2}, "label", "expected -1"),
        ({"label": "1"}, "label", "expected int, got str"),
        ({"label": True}, "label", "got bool"),
        ({"final_answer_correct": 1}, "final_answer_correct", "expected bool"),
        ({"problem": None}, "problem", "expected str"),
    ],
)
def test_malformed_item_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = write_json(tmp_path / "pb.json", [item(id="a"), item(**change), item(id="c")])

    results = list(parse(path))

    assert len(results) == 3
    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 1", field)
    assert message in error.message
    assert [r.external_id for r in results if isinstance(r, ParsedTrajectory)] == ["a", "c"]


def test_missing_key_and_non_object_items(tmp_path: Path) -> None:
    without_generator = item()
    del without_generator["generator"]
    path = write_json(tmp_path / "pb.json", [without_generator, "gsm8k-1", item()])

    results = list(parse(path))

    assert results[0] == RecordError("record 0", "generator", "is missing")
    assert results[1] == RecordError("record 1", "", "expected an object, got str")
    assert isinstance(results[2], ParsedTrajectory)


def test_not_json_file_is_a_file_error_with_position(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k.json"
    path.write_text('[\n  {"id": "a",\n   "steps": [}\n]\n', encoding="utf-8")

    with pytest.raises(
        FileError, match=r"gsm8k\.json: not valid JSON at record 0: .* \(line 3, column 14\)"
    ):
        list(parse(path))


def test_top_level_object_is_a_file_error(tmp_path: Path) -> None:
    path = write_json(tmp_path / "pb.json", item())

    with pytest.raises(FileError, match=r"pb\.json: expected a JSON array"):
        list(parse(path))
