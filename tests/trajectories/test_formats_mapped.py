"""The generic mapped importer: the mapping's validation, the issue's example mapping on a
Who&When-style file, a directory of one-record JSON files, JSON Lines with plain-string
steps, the real ProcessBench file read through a mapping, and every coercion and error."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedLabel, ParsedTrajectory, RecordError
from trajectories.formats.mapped import (
    Mapping,
    MappingError,
    StepFields,
    load_mapping,
    parse_mapped,
    parser_with_mapping,
)
from trajectories.formats.processbench import parse as parse_processbench

REPO_ROOT = Path(__file__).resolve().parents[2]
GSM8K = REPO_ROOT.parent / "shared" / "realdata" / "processbench" / "gsm8k.json"

# The example mapping from the issue.
WHO_AND_WHEN = {
    "records": "samples",
    "id": "question_ID",
    "task": "question",
    "task_key": "question_ID",
    "ground_truth": "ground_truth",
    "outcome": "is_correct",
    "steps": "history",
    "step": {"content": "content", "role": "role", "agent": "name"},
    "first_error_index": "mistake_step",
    "metadata": ["level", "mistake_agent", "mistake_reason"],
}
PLAIN_STEPS = {
    "id": "uid",
    "task": "problem",
    "steps": "solution.steps",
    "first_error_index": "solution.first_wrong",
    "outcome": "correct",
    "reward": "score",
    "model": "generator",
}


def who_record(question_id: Any = "q1", **change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "question_ID": question_id,
        "question": "Which city hosted the 1900 Olympics?",
        "ground_truth": "Paris",
        "is_correct": False,
        "level": 1,
        "mistake_agent": "WebSurfer",
        "mistake_reason": "Searched for the wrong year.",
        "mistake_step": "2",
        "history": [
            {"content": "Which city hosted the 1900 Olympics?", "role": "user"},
            {"content": "Plan: search the web.", "role": "assistant", "name": "Orchestrator"},
            {"content": "Searching 1904 Olympics host.", "role": "assistant", "name": "WebSurfer"},
            {"content": "St. Louis.", "role": "assistant", "name": "Orchestrator"},
        ],
    }
    record.update(change)
    return record


def plain_record(uid: Any = "p1", **change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "uid": uid,
        "problem": "What is 2 + 3 * 4?",
        "generator": "qwen",
        "correct": 1,
        "score": "0.75",
        "solution": {
            "steps": ["3 * 4 = 12.", "2 + 12 = 15.", "The answer is 15."],
            "first_wrong": 1,
        },
    }
    record.update(change)
    return record


def write_json(path: Path, data: Any, indent: int | None = 2) -> Path:
    path.write_text(json.dumps(data, indent=indent), encoding="utf-8")
    return path


def write_lines(path: Path, lines: list[Any]) -> Path:
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def parsed(path: Path, mapping: Mapping) -> list[ParsedTrajectory]:
    results = list(parse_mapped(path, mapping))
    assert [r for r in results if isinstance(r, RecordError)] == []
    return [r for r in results if isinstance(r, ParsedTrajectory)]


# The mapping


def test_load_mapping_reads_the_issue_example(tmp_path: Path) -> None:
    mapping = load_mapping(write_json(tmp_path / "mapping.json", WHO_AND_WHEN))

    assert mapping == Mapping(
        records="samples",
        id="question_ID",
        task="question",
        task_key="question_ID",
        ground_truth="ground_truth",
        outcome="is_correct",
        steps="history",
        step=StepFields(content="content", role="role", agent="name"),
        first_error_index="mistake_step",
        metadata=(
            ("level", "level"),
            ("mistake_agent", "mistake_agent"),
            ("mistake_reason", "mistake_reason"),
        ),
    )
    assert load_mapping(WHO_AND_WHEN) == mapping
    assert load_mapping(str(tmp_path / "mapping.json")) == mapping
    with pytest.raises(AttributeError):
        mapping.task = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"step_content": "x"}, "mapping key 'step_content': unknown"),
        ({"task": None}, "mapping key 'task': expected a dotted path string, got NoneType"),
        ({"steps": 3}, "mapping key 'steps': expected a dotted path string, got int"),
        ({"id": "a..b"}, "mapping key 'id': 'a..b' is not a dotted path"),
        ({"records": ""}, "mapping key 'records': '' is not a dotted path"),
        ({"step": "content"}, "mapping key 'step': expected an object of paths, got str"),
        ({"step": {"role": "role"}}, "mapping key 'step.content': is missing"),
        ({"step": {"content": "c", "text": "t"}}, "mapping key 'step.text': unknown"),
        ({"step": {"content": 1}}, "mapping key 'step.content': expected a dotted path"),
        ({"metadata": "level"}, "mapping key 'metadata': expected a list of paths or an object"),
        ({"metadata": ["level", 2]}, "mapping key 'metadata.1': expected a dotted path"),
        ({"metadata": {"lvl": "a."}}, "mapping key 'metadata.lvl': 'a.' is not a dotted path"),
    ],
)
def test_bad_mapping_names_the_mapping_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(MappingError) as raised:
        load_mapping({**WHO_AND_WHEN, **change})

    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("key", ["task", "steps"])
def test_mapping_needs_task_and_steps(key: str) -> None:
    data = dict(WHO_AND_WHEN)
    del data[key]

    with pytest.raises(MappingError, match=f"mapping key '{key}': is missing"):
        load_mapping(data)


def test_mapping_file_that_is_not_json_or_not_an_object(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"task": }', encoding="utf-8")

    with pytest.raises(MappingError, match=r"mapping file .*broken\.json: not valid JSON"):
        load_mapping(broken)
    with pytest.raises(MappingError, match="a mapping is a JSON object, got list"):
        load_mapping(write_json(tmp_path / "list.json", ["task"]))


def test_registered_parser_needs_a_mapping(tmp_path: Path) -> None:
    path = write_json(tmp_path / "a.json", {"samples": []})

    with pytest.raises(ValueError, match="the mapped format needs a mapping"):
        parser_for("mapped")(path)


def test_parser_with_mapping_is_a_parser_like_any_other(tmp_path: Path) -> None:
    path = write_json(tmp_path / "a.json", {"samples": [who_record()]})

    from_dict = list(parser_with_mapping(WHO_AND_WHEN)(path))
    from_mapping = list(parser_with_mapping(load_mapping(WHO_AND_WHEN))(path))

    assert from_dict == from_mapping == list(parse_mapped(path, load_mapping(WHO_AND_WHEN)))
    assert len(from_dict) == 1


# Files and records


def test_issue_example_on_a_who_and_when_file(tmp_path: Path) -> None:
    records = [
        who_record("q1"),
        who_record(17, is_correct=True, mistake_step=None),
        who_record("q3", mistake_step=-1, is_correct="true"),
    ]
    path = write_json(tmp_path / "who.json", {"version": 1, "samples": records})

    first, second, third = parsed(path, load_mapping(WHO_AND_WHEN))

    assert first.external_id == first.task_key == "q1"
    assert first.task == "Which city hosted the 1900 Olympics?"
    assert (first.ground_truth, first.success, first.outcome_reward) == ("Paris", False, 0.0)
    assert [(s.role, s.agent, s.kind, s.labelable) for s in first.steps] == [
        ("user", "", "message", False),
        ("assistant", "Orchestrator", "message", True),
        ("assistant", "WebSurfer", "message", True),
        ("assistant", "Orchestrator", "message", True),
    ]
    assert first.steps[2].content == "Searching 1904 Olympics host."
    # "2" is the index 2; the user's question is an input and takes no label.
    assert first.first_error_index == 2
    assert first.labels == [
        ParsedLabel(step_index=1, value=1, annotator="import:mapped"),
        ParsedLabel(step_index=2, value=-1, annotator="import:mapped"),
    ]
    assert first.metadata == {
        "level": 1,
        "mistake_agent": "WebSurfer",
        "mistake_reason": "Searched for the wrong year.",
    }
    assert first.raw == records[0]
    assert first.location == "record 0"

    # A number id is written out; a null index means no labels.
    assert (second.external_id, second.first_error_index, second.labels) == ("17", None, [])
    assert (second.success, second.outcome_reward) == (True, 1.0)
    assert third.first_error_index == -1
    assert [(lab.step_index, lab.value) for lab in third.labels] == [(1, 1), (2, 1), (3, 1)]
    assert third.success is True


def test_directory_of_one_record_json_files(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("b", "a", "c"):
        write_json(folder / f"{name}.json", who_record(f"run-{name}"))
    mapping = load_mapping({key: v for key, v in WHO_AND_WHEN.items() if key != "records"})

    found = [t for path in sorted(folder.glob("*.json")) for t in parsed(path, mapping)]

    assert [t.external_id for t in found] == ["run-a", "run-b", "run-c"]
    assert {t.location for t in found} == {"record 0"}
    assert all(len(t.steps) == 4 and len(t.labels) == 2 for t in found)


def test_json_lines_of_records_with_plain_string_steps(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "plain.jsonl",
        [
            plain_record("p1"),
            "",
            plain_record(
                "p2", correct=True, score=None, solution={"steps": ["42"], "first_wrong": -1}
            ),
        ],
    )

    first, second = parsed(path, load_mapping(PLAIN_STEPS))

    assert [s.content for s in first.steps] == ["3 * 4 = 12.", "2 + 12 = 15.", "The answer is 15."]
    assert all((s.kind, s.role, s.labelable) == ("thought", "assistant", True) for s in first.steps)
    assert first.labels == [
        ParsedLabel(step_index=0, value=1, annotator="import:mapped"),
        ParsedLabel(step_index=1, value=-1, annotator="import:mapped"),
    ]
    # The reward is read from its own path; the outcome 1 means success.
    assert (first.success, first.outcome_reward, first.model_name) == (True, 0.75, "qwen")
    assert (first.location, second.location) == ("line 1", "line 3")
    assert (second.success, second.outcome_reward) == (True, 1.0)
    assert [(lab.step_index, lab.value) for lab in second.labels] == [(0, 1)]


def test_real_processbench_through_a_mapping_matches_its_parser() -> None:
    mapping = load_mapping(
        {
            "id": "id",
            "task": "problem",
            "model": "generator",
            "steps": "steps",
            "outcome": "final_answer_correct",
            "first_error_index": "label",
        }
    )

    mapped = parsed(GSM8K, mapping)
    native = [r for r in parse_processbench(GSM8K) if isinstance(r, ParsedTrajectory)]

    assert len(mapped) == len(native) == 400
    for ours, theirs in zip(mapped, native, strict=True):
        assert ours.external_id == theirs.external_id
        assert ours.steps == theirs.steps
        assert ours.first_error_index == theirs.first_error_index
        assert (ours.success, ours.outcome_reward) == (theirs.success, theirs.outcome_reward)
        assert [(lab.step_index, lab.value) for lab in ours.labels] == [
            (lab.step_index, lab.value) for lab in theirs.labels
        ]
        assert ours.location == theirs.location
    assert sum(len(t.labels) for t in mapped) == sum(len(t.labels) for t in native)


def test_records_path_through_a_list_position(tmp_path: Path) -> None:
    path = write_json(tmp_path / "nested.json", {"splits": [{"rows": [who_record("n1")]}]})
    mapping = load_mapping({**WHO_AND_WHEN, "records": "splits.0.rows"})

    [trajectory] = parsed(path, mapping)

    assert trajectory.external_id == "n1"
    assert trajectory.location == "record 0"


def test_paths_reach_into_lists(tmp_path: Path) -> None:
    record = {
        "meta": {"ids": ["x", "y"]},
        "turns": [{"text": "Q?"}, {"text": "A."}],
        "steps": [{"parts": [{"text": "first"}]}, {"parts": [{"text": "second"}]}],
    }
    mapping = load_mapping(
        {
            "id": "meta.ids.-1",
            "task": "turns.0.text",
            "steps": "steps",
            "step": {"content": "parts.0.text"},
        }
    )

    [trajectory] = parsed(write_json(tmp_path / "r.json", record), mapping)

    assert (trajectory.external_id, trajectory.task) == ("y", "Q?")
    assert [s.content for s in trajectory.steps] == ["first", "second"]


def test_without_an_id_the_content_names_the_record(tmp_path: Path) -> None:
    mapping = load_mapping({"task": "problem", "steps": "solution.steps"})
    path = write_lines(
        tmp_path / "a.jsonl", [plain_record("x"), plain_record("x"), plain_record("y")]
    )

    first, same, other = parsed(path, mapping)

    assert first.external_id.startswith("mapped-")
    assert first.external_id == same.external_id != other.external_id


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"question": None}, "question", "is null"),
        ({"question": {"text": "q"}}, "question", "expected text, got dict"),
        ({"history": "none"}, "history", "expected a list of steps, got str"),
        ({"history": []}, "history", "is empty"),
        ({"history": ["hi"]}, "history.0", "expected a step object, got str"),
        ({"history": [{"role": "assistant"}]}, "history.0.content", "is missing"),
        ({"history": [{"content": True}]}, "history.0.content", "expected text, got bool"),
        ({"mistake_step": "two"}, "mistake_step", "expected a step index, got 'two'"),
        ({"mistake_step": True}, "mistake_step", "expected a step index, got bool"),
        ({"mistake_step": 9}, "mistake_step", "is 9; expected -1 (no error) or a step index"),
        ({"mistake_step": "0"}, "mistake_step", "points at step 0, whose role 'user'"),
        ({"is_correct": "maybe"}, "is_correct", "expected true/false or 1/0, got 'maybe'"),
        ({"is_correct": 2}, "is_correct", "expected true/false or 1/0, got int"),
        ({"question_ID": None}, "question_ID", "is null"),
        ({"question_ID": " "}, "question_ID", "is empty"),
        ({"ground_truth": ["Paris"]}, "ground_truth", "expected text, got list"),
    ],
)
def test_malformed_record_names_record_and_path(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = write_json(
        tmp_path / "who.json",
        {"samples": [who_record("a"), who_record("b", **change), who_record("c")]},
    )

    results = list(parse_mapped(path, load_mapping(WHO_AND_WHEN)))

    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 1", field)
    assert message in error.message
    assert [r.external_id for r in results if isinstance(r, ParsedTrajectory)] == ["a", "c"]


def test_missing_task_and_unmapped_step_objects(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "a.jsonl", [plain_record(), who_record(), "[1]"])
    plain = load_mapping({**PLAIN_STEPS, "task": "question", "steps": "history"})

    results = list(parse_mapped(path, plain))

    assert results[0] == RecordError("line 1", "question", "is missing")
    assert results[1] == RecordError(
        "line 2", "history.0", "expected a string step (the mapping has no 'step'), got dict"
    )
    assert results[2] == RecordError("line 3", "", "expected a record object, got list")


def test_step_kind_must_be_a_known_kind(tmp_path: Path) -> None:
    record = {"q": "t", "s": [{"c": "x", "k": "tool_call"}, {"c": "y", "k": "plan"}]}
    mapping = load_mapping({"task": "q", "steps": "s", "step": {"content": "c", "kind": "k"}})

    [error] = list(parse_mapped(write_json(tmp_path / "r.json", record), mapping))

    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 0", "s.1.k")
    assert error.message.startswith("is 'plan'; expected one of message, thought")


def test_records_path_missing_or_not_a_list_is_a_file_error(tmp_path: Path) -> None:
    mapping = load_mapping(WHO_AND_WHEN)
    missing = write_json(tmp_path / "missing.json", {"rows": [who_record()]})
    not_list = write_json(tmp_path / "object.json", {"samples": {"a": who_record()}})
    empty = write_json(tmp_path / "empty.json", {"samples": []})

    with pytest.raises(FileError, match=r"mapping key 'records': 'samples' is not in the file"):
        list(parse_mapped(missing, mapping))
    with pytest.raises(FileError, match=r"'samples' is an object, expected a list of records"):
        list(parse_mapped(not_list, mapping))
    assert list(parse_mapped(empty, mapping)) == []


def test_truncated_records_file_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "who.json"
    path.write_text(json.dumps({"samples": [who_record(), who_record()]})[:-40], encoding="utf-8")

    with pytest.raises(FileError, match=r"who\.json: not valid JSON at record 1"):
        list(parse_mapped(path, load_mapping(WHO_AND_WHEN)))


# The labelable rule, on the real Who&When logs

WHO_AND_WHEN_DIR = REPO_ROOT.parent / "shared" / "realdata" / "multiagent_who_and_when"
# One mapping reads both halves of the set. AG2 group chats (Algorithm-Generated) give
# the experts' turns the role user and tell them apart by name, and the code runner
# Computer_terminal is the environment; Magentic-One logs (Hand-Crafted) put the
# speaker in role and call the person asking "human".
WHO_AND_WHEN_LABELABLE = {
    "id": "question_ID",
    "task": "question",
    "ground_truth": "ground_truth",
    "steps": "history",
    "step": {"content": "content", "role": "role", "agent": "name"},
    "first_error_index": "mistake_step",
    "metadata": ["mistake_agent", "mistake_step", "mistake_reason"],
    "labelable": {
        "agents": "*",
        "input_agents": ["Computer_terminal"],
        "input_roles": ["human", "system", "user", "tool"],
    },
}
# steps, labelable steps, first error index
WHO_AND_WHEN_COUNTS = {
    "Hand-Crafted/1.json": (29, 28, 12),
    "Hand-Crafted/24.json": (5, 4, 1),
    "Algorithm-Generated/1.json": (6, 4, 0),
    "Algorithm-Generated/21.json": (6, 6, 0),
    "Algorithm-Generated/47.json": (6, 6, 1),
}


def who_and_when(name: str, mapping: dict[str, Any] = WHO_AND_WHEN_LABELABLE) -> ParsedTrajectory:
    [trajectory] = parsed(WHO_AND_WHEN_DIR / name, load_mapping(mapping))
    return trajectory


@pytest.mark.parametrize("name", list(WHO_AND_WHEN_COUNTS))
def test_who_and_when_labelable_rule_on_the_real_files(name: str) -> None:
    trajectory = who_and_when(name)
    steps, labelable, first_error = WHO_AND_WHEN_COUNTS[name]
    assert len(trajectory.steps) == steps
    assert sum(step.labelable for step in trajectory.steps) == labelable
    assert trajectory.first_error_index == first_error
    assert trajectory.steps[first_error].labelable
    raw = json.loads((WHO_AND_WHEN_DIR / name).read_text(encoding="utf-8"))
    assert trajectory.metadata == {
        key: raw[key] for key in ("mistake_agent", "mistake_step", "mistake_reason")
    }
    # The labels end at the human-labelled mistake, on labelable steps only.
    assert trajectory.labels[-1] == ParsedLabel(first_error, -1, "import:mapped")
    assert all(trajectory.steps[label.step_index].labelable for label in trajectory.labels)


def test_ag2_experts_are_labelable_and_the_terminal_is_not() -> None:
    trajectory = who_and_when("Algorithm-Generated/1.json")
    assert [(s.role, s.agent, s.labelable) for s in trajectory.steps] == [
        ("assistant", "Excel_Expert", True),
        ("user", "Computer_terminal", False),
        ("user", "BusinessLogic_Expert", True),
        ("user", "Computer_terminal", False),
        ("user", "DataVerification_Expert", True),
        ("user", "DataVerification_Expert", True),
    ]
    assert trajectory.metadata["mistake_agent"] == "Excel_Expert"


def test_magentic_one_human_is_the_only_input() -> None:
    trajectory = who_and_when("Hand-Crafted/1.json")
    [question] = [step for step in trajectory.steps if not step.labelable]
    assert question is trajectory.steps[0] and question.role == "human"
    assert trajectory.steps[12].role == "WebSurfer"
    assert trajectory.metadata["mistake_agent"] == "WebSurfer"


def test_without_the_rule_the_experts_user_turns_are_inputs() -> None:
    # What the rule is for: by role alone, AG2's experts speaking as user are inputs,
    # and Magentic-One's human is a decision.
    plain = {key: value for key, value in WHO_AND_WHEN_LABELABLE.items() if key != "labelable"}
    ag2 = who_and_when("Algorithm-Generated/1.json", plain)
    assert [step.labelable for step in ag2.steps] == [True, False, False, False, False, False]
    magentic = who_and_when("Hand-Crafted/1.json", plain)
    assert magentic.steps[0].labelable


def test_labelable_path_reads_a_boolean_from_the_step(tmp_path: Path) -> None:
    record = who_record(mistake_step=None)
    record["history"][1]["judged"] = False
    record["history"][0]["judged"] = True
    mapping = {**WHO_AND_WHEN, "labelable": {"path": "judged"}}
    [trajectory] = parsed(
        write_json(tmp_path / "w.json", {"samples": [record]}), load_mapping(mapping)
    )
    # A boolean at the path decides; a step without one falls back to the roles.
    assert [step.labelable for step in trajectory.steps] == [True, False, True, True]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"agent": ["Excel_Expert"]},
            "mapping key 'labelable.agent': unknown; expected one of path, roles, agents, "
            "input_roles, input_agents",
        ),
        ({"agents": "Excel_Expert"}, "mapping key 'labelable.agents': expected a list of names"),
        ({"input_roles": ["human", 3]}, "mapping key 'labelable.input_roles': expected a list"),
        ({"path": 3}, "mapping key 'labelable.path': expected a dotted path string"),
        ({"path": "a..b"}, "mapping key 'labelable.path': 'a..b' is not a dotted path"),
        (["agents"], "mapping key 'labelable': expected an object, got list"),
    ],
)
def test_bad_labelable_rule_names_the_key(rule: Any, message: str) -> None:
    with pytest.raises(MappingError) as raised:
        load_mapping({**WHO_AND_WHEN_LABELABLE, "labelable": rule})
    assert str(raised.value).startswith(message)


# Agent lanes for Magentic-One, whose speaker is in role

# The same mapping, with the agent read from name (AG2) or else from role (Magentic-One),
# where the pattern makes "Orchestrator (thought)" and "Orchestrator (-> WebSurfer)" one
# agent. The asking person, now an agent too, is named an input.
WHO_AND_WHEN_LANES = {
    **WHO_AND_WHEN_LABELABLE,
    "step": {"content": "content", "role": "role", "agent": ["name", "role"]},
    "agent_pattern": r"(?P<agent>[^(]+?)(?: \(.*\))?$",
    "labelable": {
        "agents": "*",
        "input_agents": ["Computer_terminal", "human"],
        "input_roles": ["human", "system", "user", "tool"],
    },
}
# agent -> steps, in each real file.
WHO_AND_WHEN_LANE_COUNTS = {
    "Hand-Crafted/1.json": {"Orchestrator": 21, "WebSurfer": 7, "human": 1},
    "Hand-Crafted/24.json": {"Orchestrator": 4, "human": 1},
    "Algorithm-Generated/1.json": {
        "Excel_Expert": 1,
        "Computer_terminal": 2,
        "BusinessLogic_Expert": 1,
        "DataVerification_Expert": 2,
    },
    "Algorithm-Generated/21.json": {
        "Lyrics_Expert": 4,
        "MusicHistorian_Expert": 1,
        "Linguistics_Expert": 1,
    },
    "Algorithm-Generated/47.json": {"Mesopotamian_Number_Systems_Expert": 6},
}


@pytest.mark.parametrize("name", list(WHO_AND_WHEN_LANE_COUNTS))
def test_agent_lanes_from_name_or_role_on_the_real_files(name: str) -> None:
    trajectory = who_and_when(name, WHO_AND_WHEN_LANES)
    assert dict(Counter(step.agent for step in trajectory.steps)) == WHO_AND_WHEN_LANE_COUNTS[name]
    # Steps and labelable steps as with the rule alone: the lanes change no label.
    steps, labelable, first_error = WHO_AND_WHEN_COUNTS[name]
    assert (len(trajectory.steps), sum(step.labelable for step in trajectory.steps)) == (
        steps,
        labelable,
    )
    assert trajectory.first_error_index == first_error
    # The decisive step is in the lane of the agent the annotators blamed.
    assert trajectory.steps[first_error].agent == trajectory.metadata["mistake_agent"]


def test_magentic_one_roles_stay_as_they_were_written() -> None:
    trajectory = who_and_when("Hand-Crafted/1.json", WHO_AND_WHEN_LANES)
    assert [(s.role, s.agent, s.labelable) for s in trajectory.steps[:5]] == [
        ("human", "human", False),
        ("Orchestrator (thought)", "Orchestrator", True),
        ("Orchestrator (thought)", "Orchestrator", True),
        ("Orchestrator (-> WebSurfer)", "Orchestrator", True),
        ("WebSurfer", "WebSurfer", True),
    ]


def test_without_the_pattern_each_role_is_its_own_agent() -> None:
    plain = {key: value for key, value in WHO_AND_WHEN_LANES.items() if key != "agent_pattern"}
    trajectory = who_and_when("Hand-Crafted/1.json", plain)
    assert {step.agent for step in trajectory.steps} == {
        "human",
        "Orchestrator (thought)",
        "Orchestrator (-> WebSurfer)",
        "WebSurfer",
    }


def test_agent_pattern_first_group_and_no_match(tmp_path: Path) -> None:
    record = who_record(mistake_step=None)
    record["history"][1]["name"] = "Planner [v2]"
    mapping = {**WHO_AND_WHEN, "agent_pattern": r"(\w+) \[v\d\]"}
    [trajectory] = parsed(
        write_json(tmp_path / "w.json", {"samples": [record]}), load_mapping(mapping)
    )
    # The first group where the pattern matches; the agent as written where it does not.
    assert [step.agent for step in trajectory.steps] == ["", "Planner", "WebSurfer", "Orchestrator"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"agent_pattern": "Orchestrator"}, "mapping key 'agent_pattern': needs a group"),
        ({"agent_pattern": "(unclosed"}, "mapping key 'agent_pattern': not a regular expression"),
        ({"agent_pattern": ["x"]}, "mapping key 'agent_pattern': expected a regular expression"),
        (
            {"step": {"content": "content", "agent": ["name", 3]}},
            "mapping key 'step.agent.1': expected a dotted path string, got int",
        ),
        (
            {"step": {"content": "content", "agent": {"a": "b"}}},
            "mapping key 'step.agent': expected a dotted path string or a list of them",
        ),
    ],
)
def test_bad_agent_settings_name_the_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(MappingError) as raised:
        load_mapping({**WHO_AND_WHEN_LANES, **change})
    assert str(raised.value).startswith(message)
