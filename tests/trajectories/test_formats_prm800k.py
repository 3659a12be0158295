"""The PRM800K parser on the real phase 1 and phase 2 samples, and on small records
that exercise chosen, human and missing completions and every kind of damage."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedLabel, ParsedTrajectory, RecordError
from trajectories.formats.prm800k import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLES = REPO_ROOT.parent / "shared" / "realdata" / "prm800k_sample"
PHASE1 = SAMPLES / "phase1_train_sample.jsonl"
PHASE2 = SAMPLES / "phase2_train_sample.jsonl"


def completion(text: str, rating: int | None) -> dict[str, Any]:
    return {"text": text, "rating": rating, "flagged": False}


def record(**change: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "labeler": "lab-1",
        "timestamp": "2022-07-30T23:23:32.118856",
        "generation": None,
        "is_quality_control_question": False,
        "is_initial_screening_question": False,
        "question": {"problem": "What is 2 + 3 * 4?", "ground_truth_answer": "14"},
        "label": {
            "steps": [
                {
                    "completions": [completion("3 * 4 = 12.", 1)],
                    "human_completion": None,
                    "chosen_completion": 0,
                },
                {
                    "completions": [completion("2 + 12 = 15.", -1), completion("2 + 12 = 14.", 1)],
                    "human_completion": None,
                    "chosen_completion": 1,
                },
                {
                    "completions": [completion("The answer is 15.", -1)],
                    "human_completion": {
                        "text": "# Answer\n\n14",
                        "rating": None,
                        "source": "human",
                        "flagged": False,
                    },
                    "chosen_completion": None,
                },
            ],
            "total_time": 1234,
            "finish_reason": "solution",
        },
    }
    data.update(change)
    return data


def write_lines(path: Path, lines: list[Any]) -> Path:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def trajectories(path: Path) -> list[ParsedTrajectory]:
    results = list(parse(path))
    assert [r for r in results if isinstance(r, RecordError)] == []
    return [r for r in results if isinstance(r, ParsedTrajectory)]


@pytest.fixture(scope="module")
def phase1() -> list[ParsedTrajectory]:
    return trajectories(PHASE1)


@pytest.fixture(scope="module")
def phase2() -> list[ParsedTrajectory]:
    return trajectories(PHASE2)


def test_registered_under_its_format_name() -> None:
    assert parser_for("prm800k") is parse


def test_phase1_counts(phase1: list[ParsedTrajectory]) -> None:
    main = [t for t in phase1 if not t.parent_external_id]
    branches = [t for t in phase1 if t.parent_external_id]

    assert len(main) == 3
    assert len(branches) == 127
    assert [len(t.steps) for t in main] == [6, 29, 6]
    assert [t.metadata["finish_reason"] for t in main] == ["solution", "give_up", "solution"]
    # Every rating once: the chosen ones on the main paths, the rest on their branches.
    assert Counter(label.value for t in phase1 for label in t.labels) == {-1: 67, 0: 44, 1: 37}
    assert Counter(label.value for t in main for label in t.labels) == {1: 28}
    # The 7 null ratings are the 7 completions offered where the labeler stopped.
    assert sum(1 for t in branches if not t.labels) == 7
    human = [s for t in main for s in t.steps if s.metadata.get("source") == "human"]
    assert len(human) == 13
    assert {label.annotator for t in phase1 for label in t.labels} == {"import:prm800k"}


def test_phase2_counts(phase2: list[ParsedTrajectory]) -> None:
    main = [t for t in phase2 if not t.parent_external_id]
    branches = [t for t in phase2 if t.parent_external_id]

    assert len(main) == 9
    assert len(branches) == 40
    assert [len(t.steps) for t in main] == [6, 18, 2, 1, 2, 10, 1, 25, 2]
    assert {t.metadata["finish_reason"] for t in main} == {"found_error"}
    assert Counter(label.value for t in phase2 for label in t.labels) == {1: 69, -1: 21, 0: 17}
    assert all(len(t.labels) == 1 for t in branches)
    assert {t.metadata["generation"] for t in main} == {6}
    # Six labelers' passes over one problem share its task key.
    assert len({t.task_key for t in main}) == 4


@pytest.mark.parametrize("path", [PHASE1, PHASE2], ids=["phase1", "phase2"])
def test_real_ratings_land_on_the_completion_they_rate(path: Path) -> None:
    by_id = {t.external_id: t for t in trajectories(path)}
    for line in path.read_text(encoding="utf-8").splitlines():
        source = json.loads(line)
        main_id = f"{source['labeler']}:{source['timestamp']}"
        main = by_id[main_id]
        assert main.task == source["question"]["problem"]
        assert main.ground_truth == source["question"]["ground_truth_answer"]
        assert main.raw == source
        main_labels = {label.step_index: label.value for label in main.labels}
        for index, step in enumerate(source["label"]["steps"]):
            chosen = step["chosen_completion"]
            for number, offered in enumerate(step["completions"]):
                if number == chosen:
                    assert main.steps[index].content == offered["text"]
                    assert main_labels.get(index) == offered["rating"]
                    continue
                branch = by_id[f"{main_id}:{index}:{number}"]
                assert branch.parent_external_id == main_id
                assert branch.branch_index == index
                assert branch.steps[:index] == main.steps[:index]
                assert branch.steps[index].content == offered["text"]
                assert len(branch.steps) == index + 1
                expected = [] if offered["rating"] is None else [(index, offered["rating"])]
                assert [(lab.step_index, lab.value) for lab in branch.labels] == expected
            if chosen is None and step["human_completion"] is not None:
                assert main.steps[index].content == step["human_completion"]["text"]
                assert index not in main_labels


def test_chosen_human_and_alternative_completions(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "prm.jsonl", [record()])

    main, alternative, rejected_final = trajectories(path)

    problem_hash = hashlib.sha256(b"What is 2 + 3 * 4?").hexdigest()[:16]
    assert main.external_id == "lab-1:2022-07-30T23:23:32.118856"
    assert (main.task_key, main.ground_truth) == (f"prm-{problem_hash}", "14")
    assert [s.content for s in main.steps] == ["3 * 4 = 12.", "2 + 12 = 14.", "# Answer\n\n14"]
    assert all(s.kind == "thought" and s.labelable for s in main.steps)
    assert main.steps[1].metadata == {"completion": 1, "flagged": False}
    assert main.steps[2].metadata == {"source": "human", "flagged": False}
    assert main.labels == [
        ParsedLabel(step_index=0, value=1, annotator="import:prm800k"),
        ParsedLabel(step_index=1, value=1, annotator="import:prm800k"),
    ]
    assert main.metadata == {
        "labeler": "lab-1",
        "timestamp": "2022-07-30T23:23:32.118856",
        "generation": None,
        "is_quality_control_question": False,
        "is_initial_screening_question": False,
        "finish_reason": "solution",
        "total_time": 1234,
    }
    assert (main.parent_external_id, main.branch_index) == ("", None)
    assert (main.outcome_reward, main.success) == (None, None)

    assert alternative.external_id == "lab-1:2022-07-30T23:23:32.118856:1:0"
    assert (alternative.parent_external_id, alternative.branch_index) == (main.external_id, 1)
    assert [s.content for s in alternative.steps] == ["3 * 4 = 12.", "2 + 12 = 15."]
    assert alternative.labels == [ParsedLabel(step_index=1, value=-1, annotator="import:prm800k")]
    assert alternative.raw == completion("2 + 12 = 15.", -1)
    assert alternative.metadata == main.metadata
    assert alternative.location == main.location == "line 1"

    # With a human completion chosen, every offered completion is an alternative.
    assert rejected_final.external_id.endswith(":2:0")
    assert [s.content for s in rejected_final.steps] == [
        "3 * 4 = 12.",
        "2 + 12 = 14.",
        "The answer is 15.",
    ]
    assert [(lab.step_index, lab.value) for lab in rejected_final.labels] == [(2, -1)]


def test_labeler_who_stops_ends_the_trajectory(tmp_path: Path) -> None:
    steps = record()["label"]["steps"]
    steps[2] = {
        "completions": [completion("15.", -1), completion("14?", None)],
        "human_completion": None,
        "chosen_completion": None,
    }
    source = record(label={"steps": steps, "finish_reason": "found_error", "total_time": 5})
    path = write_lines(tmp_path / "prm.jsonl", [source])

    main, _, *stopped_at = trajectories(path)

    assert len(main.steps) == 2
    assert [len(t.steps) for t in stopped_at] == [3, 3]
    assert [t.labels for t in stopped_at] == [
        [ParsedLabel(step_index=2, value=-1, annotator="import:prm800k")],
        [],
    ]


def test_nothing_chosen_at_the_first_step_leaves_standalone_alternatives(tmp_path: Path) -> None:
    steps = [
        {
            "completions": [completion("12.", -1), completion("14.", 0)],
            "human_completion": None,
            "chosen_completion": None,
        }
    ]
    path = write_lines(tmp_path / "prm.jsonl", [record(label={"steps": steps})])

    results = trajectories(path)

    assert [t.external_id for t in results] == [
        "lab-1:2022-07-30T23:23:32.118856:0:0",
        "lab-1:2022-07-30T23:23:32.118856:0:1",
    ]
    assert all((t.parent_external_id, t.branch_index) == ("", None) for t in results)
    assert [[lab.value for lab in t.labels] for t in results] == [[-1], [0]]


def steps_with(index: int, **change: Any) -> dict[str, Any]:
    steps = record()["label"]["steps"]
    steps[index] = {**steps[index], **change}
    return {"label": {"steps": steps}}


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"labeler": None}, "labeler", "expected str"),
        ({"question": {"ground_truth_answer": "1"}}, "question.problem", "is missing"),
        ({"label": {"steps": []}}, "label.steps", "is empty"),
        ({"label": {"steps": "x"}}, "label.steps", "expected list, got str"),
        ({"label": {"steps": [7]}}, "label.steps.0", "expected an object, got int"),
        (steps_with(1, chosen_completion=2), "label.steps.1.chosen_completion", "has 2"),
        (steps_with(1, chosen_completion="1"), "label.steps.1.chosen_completion", "expected int"),
        (
            steps_with(0, completions=[completion("x", 2)]),
            "label.steps.0.completions.0.rating",
            "is 2",
        ),
        (
            steps_with(0, completions=[{"rating": 1}]),
            "label.steps.0.completions.0.text",
            "is missing",
        ),
        (
            steps_with(1, chosen_completion=None),
            "label.steps.2",
            "follows step 1, which has neither",
        ),
        (
            steps_with(2, human_completion={"text": 5}),
            "label.steps.2.human_completion.text",
            "expected str",
        ),
    ],
)
def test_malformed_record_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = write_lines(
        tmp_path / "prm.jsonl",
        [record(labeler="a"), record(**change), record(labeler="c")],
    )

    results = list(parse(path))

    errors = [r for r in results if isinstance(r, RecordError)]
    assert len(errors) == 1
    assert (errors[0].location, errors[0].field) == ("line 2", field)
    assert message in errors[0].message
    main_ids = [
        r.external_id
        for r in results
        if isinstance(r, ParsedTrajectory) and not r.parent_external_id
    ]
    assert main_ids == ["a:2022-07-30T23:23:32.118856", "c:2022-07-30T23:23:32.118856"]


def test_broken_line_after_a_good_one_is_one_record_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "prm.jsonl", [record(), '{"labeler": ', [1, 2]])

    results = list(parse(path))

    assert len([r for r in results if isinstance(r, ParsedTrajectory)]) == 3
    broken, listed = results[3:]
    assert isinstance(broken, RecordError)
    assert (broken.location, broken.field) == ("line 2", "")
    assert "not valid JSON" in broken.message
    assert listed == RecordError("line 3", "", "expected an object, got list")


def test_file_that_is_not_json_lines_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "prm.jsonl"
    path.write_text("labeler,timestamp\na,b\n", encoding="utf-8")

    with pytest.raises(FileError, match=r"prm\.jsonl: expected a JSON array"):
        list(parse(path))
