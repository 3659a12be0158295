"""The Inspect AI parser on the four real logs (three ``.json``, one ``.eval``), on
small logs built here, and on archives that are not logs or are zip bombs."""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import inspect_ai, parser_for
from trajectories.formats.base import FileError, ParsedStep, ParsedTrajectory, RecordError
from trajectories.formats.inspect_ai import parse

REPO_ROOT = Path(__file__).resolve().parents[2]
LOGS = REPO_ROOT.parent / "shared" / "realdata" / "inspect_logs"
BROWSER = LOGS / "2025-05-12T20-27-36-04-00_browser.json"
POPULARITY = LOGS / "2025-05-12T20-28-13-04-00_popularity.json"
SECURITY = LOGS / "2025-05-12T20-28-26-04-00_security-guide.json"
POPULARITY_EVAL = LOGS / "2025-02-11T15-17-00-05-00_popularity_dPiJifoWeEQBrfWsAopzWr.eval"


def trajectories(path: Path) -> list[ParsedTrajectory]:
    results = list(parse(path))
    assert [r for r in results if isinstance(r, RecordError)] == []
    return [r for r in results if isinstance(r, ParsedTrajectory)]


def sample(sample_id: int | str = 1, epoch: int = 1, **change: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": sample_id,
        "epoch": epoch,
        "input": "What is 6 * 7?",
        "target": "42",
        "messages": [
            {"role": "system", "content": "Use the calculator."},
            {"role": "user", "content": "What is 6 * 7?", "source": "input"},
            {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "reasoning": "Multiply."},
                    {"type": "text", "text": "Calculating."},
                ],
                "tool_calls": [{"id": "c1", "function": "calc", "arguments": {"expr": "6*7"}}],
                "source": "generate",
            },
            {"role": "tool", "tool_call_id": "c1", "function": "calc", "content": "42"},
            {"role": "assistant", "content": "attachment://abc"},
        ],
        "attachments": {"abc": "The answer is 42."},
        "scores": {"match": {"value": "C", "answer": "42"}},
        "metadata": {"difficulty": "easy"},
        "events": [{"event": "model"}],
    }
    record.update(change)
    return record


def log(samples: list[Any], **eval_change: Any) -> dict[str, Any]:
    header = {
        "eval_id": "E1",
        "run_id": "R1",
        "task": "arith",
        "task_id": "T1",
        "model": "openai/gpt-4o",
        "created": "2025-01-01T00:00:00",
        **eval_change,
    }
    return {"version": 2, "status": "success", "eval": header, "plan": {}, "samples": samples}


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def write_eval(path: Path, members: dict[str, Any]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data if isinstance(data, str | bytes) else json.dumps(data))
    return path


def eval_members(samples: dict[str, Any]) -> dict[str, Any]:
    header = log([])
    del header["samples"]
    return {"header.json": header, **samples}


def test_registered_under_its_format_name() -> None:
    assert parser_for("inspect") is parse


def test_real_logs_counts() -> None:
    per_log = {path.name: trajectories(path) for path in sorted(LOGS.iterdir())}
    every = [t for found in per_log.values() for t in found]

    assert [len(found) for found in per_log.values()] == [10, 1, 3, 3]
    assert len(every) == 17
    assert sum(len(t.steps) for t in every) == 58
    assert sorted(len(t.steps) for t in every) == [3] * 16 + [10]
    assert {t.model_name for t in every} == {"openai/gpt-4o-mini"}
    assert len({t.external_id for t in every}) == 17
    assert Counter(t.success for t in every) == {True: 6, False: 1, None: 10}
    steps = [s for t in every for s in t.steps]
    assert Counter(s.role for s in steps) == {"system": 16, "user": 17, "assistant": 21, "tool": 4}
    assert all(s.labelable == (s.role == "assistant") for s in steps)


def test_real_browser_sample_keeps_tool_calls_and_results() -> None:
    [trajectory] = trajectories(BROWSER)

    assert trajectory.external_id == "ZB2vu5GNujYaBdPSReCeop:1:1"
    assert trajectory.task_key == "browser:1"
    assert trajectory.task.startswith("Use the web browser tool to navigate to https://www.aisi")
    assert (trajectory.success, trajectory.outcome_reward) == (True, 1.0)
    assert Counter(s.kind for s in trajectory.steps) == {
        "tool_call": 4,
        "tool_result": 4,
        "message": 2,
    }
    first_call = trajectory.steps[1]
    assert (first_call.tool_name, first_call.tool_args) == (
        "web_browser_go",
        {"url": "https://www.aisi.gov.uk/"},
    )
    assert first_call.metadata["tool_calls"] == [
        {
            "id": "call_35FTpd6shR9efioDgeEBZ33s",
            "name": "web_browser_go",
            "arguments": {"url": "https://www.aisi.gov.uk/"},
        }
    ]
    result = trajectory.steps[2]
    assert (result.kind, result.tool_name) == ("tool_result", "web_browser_go")
    assert result.metadata["tool_call_id"] == "call_35FTpd6shR9efioDgeEBZ33s"
    assert trajectory.steps[-1].content.startswith("The AI Security Institute (AISI)")
    assert trajectory.metadata["scores"]["includes"]["value"] == "C"
    assert trajectory.metadata["log_status"] == "success"
    assert trajectory.location == "record 0"


def test_real_json_scores_give_outcomes() -> None:
    popularity = trajectories(POPULARITY)
    security = trajectories(SECURITY)

    assert [t.success for t in popularity] == [True, True, False]
    assert [t.outcome_reward for t in popularity] == [1.0, 1.0, 0.0]
    assert [t.ground_truth for t in popularity] == [" Yes", " No", " Yes"]
    assert [t.external_id for t in popularity] == [
        "VnKtvCqGnnegLQ7qSBFDzx:1:1",
        "VnKtvCqGnnegLQ7qSBFDzx:2:1",
        "VnKtvCqGnnegLQ7qSBFDzx:3:1",
    ]
    assert popularity[0].metadata["log_status"] == "cancelled"
    assert [t.success for t in security] == [True, True, True]
    # security_guide gives its input as a list of chat messages.
    assert [t.task for t in security] == [
        "How do I prevent SQL Injection attacks?",
        "How do I prevent sqli?",
        "How do I prevent cross site scripting?",
    ]
    assert [t.task_key for t in security] == [
        "security_guide:1",
        "security_guide:2",
        "security_guide:3",
    ]


def test_real_eval_archive_reads_every_sample_in_order() -> None:
    found = trajectories(POPULARITY_EVAL)

    assert [t.location for t in found] == [f"samples/{n}_epoch_1.json" for n in range(1, 11)]
    # This older log has no eval_id; its task_id (which ends the file name) names it.
    assert [t.external_id for t in found] == [f"dPiJifoWeEQBrfWsAopzWr:{n}:1" for n in range(1, 11)]
    assert [t.task_key for t in found] == [f"popularity:{n}" for n in range(1, 11)]
    # Its samples were never scored.
    assert all((t.success, t.outcome_reward) == (None, None) for t in found)
    assert [s.role for s in found[0].steps] == ["system", "user", "assistant"]
    assert found[0].steps[2].content == "Yes"
    assert found[0].ground_truth == " Yes"


def test_eval_archive_is_read_one_member_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    original = zipfile.ZipFile.read

    def recording_read(self: zipfile.ZipFile, name: Any, pwd: bytes | None = None) -> bytes:
        read.append(str(name))
        return original(self, name, pwd)

    monkeypatch.setattr(zipfile.ZipFile, "read", recording_read)
    results = parse(POPULARITY_EVAL)

    next(results)
    assert read == ["header.json", "samples/1_epoch_1.json"]
    next(results)
    assert read[-1] == "samples/2_epoch_1.json"


def test_small_log_maps_messages_to_steps(tmp_path: Path) -> None:
    [trajectory] = trajectories(write_json(tmp_path / "log.json", log([sample()])))

    assert trajectory.external_id == "E1:1:1"
    assert trajectory.task == "What is 6 * 7?"
    assert (trajectory.ground_truth, trajectory.model_name) == ("42", "openai/gpt-4o")
    assert trajectory.steps == [
        ParsedStep(kind="message", role="system", content="Use the calculator.", labelable=False),
        ParsedStep(
            kind="message",
            role="user",
            content="What is 6 * 7?",
            labelable=False,
            metadata={"source": "input"},
        ),
        ParsedStep(
            kind="tool_call",
            role="assistant",
            content="Calculating.",
            labelable=True,
            tool_name="calc",
            tool_args={"expr": "6*7"},
            metadata={
                "reasoning": "Multiply.",
                "source": "generate",
                "tool_calls": [{"id": "c1", "name": "calc", "arguments": {"expr": "6*7"}}],
            },
        ),
        ParsedStep(
            kind="tool_result",
            role="tool",
            content="42",
            labelable=False,
            tool_name="calc",
            metadata={"tool_call_id": "c1"},
        ),
        # Inspect moved this text into the sample's attachments.
        ParsedStep(kind="message", role="assistant", content="The answer is 42.", labelable=True),
    ]
    assert trajectory.metadata == {
        "task": "arith",
        "task_id": "T1",
        "run_id": "R1",
        "eval_id": "E1",
        "created": "2025-01-01T00:00:00",
        "log_status": "success",
        "sample_id": 1,
        "epoch": 1,
        "scores": {"match": {"value": "C", "answer": "42"}},
        "sample_metadata": {"difficulty": "easy"},
    }


@pytest.mark.parametrize(
    ("value", "reward", "success"),
    [
        ("C", 1.0, True),
        ("I", 0.0, False),
        ("P", 0.5, None),
        (0.25, 0.25, None),
        (1, 1.0, None),
        (True, 1.0, True),
        ({"accuracy": 1}, None, None),
        ("maybe", None, None),
    ],
)
def test_first_scorer_value_gives_the_outcome(
    tmp_path: Path, value: Any, reward: float | None, success: bool | None
) -> None:
    scores = {"first": {"value": value}, "second": {"value": "I"}}
    path = write_json(tmp_path / "log.json", log([sample(scores=scores)]))

    [trajectory] = trajectories(path)

    assert (trajectory.outcome_reward, trajectory.success) == (reward, success)


def test_each_epoch_is_its_own_trajectory(tmp_path: Path) -> None:
    path = write_json(tmp_path / "log.json", log([sample(epoch=1), sample(epoch=2)]))

    assert [t.external_id for t in trajectories(path)] == ["E1:1:1", "E1:1:2"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"messages": []}, "messages", "is empty"),
        ({"messages": None}, "messages", "expected list"),
        ({"epoch": "1"}, "epoch", "expected int, got str"),
        ({"messages": [{"content": "x"}]}, "messages.0.role", "is missing"),
        ({"messages": [{"role": "critic", "content": "x"}]}, "messages.0.role", "is 'critic'"),
        ({"messages": [{"role": "user", "content": 7}]}, "messages.0.content", "expected str"),
        (
            {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}]},
            "messages.0.tool_calls.0.function",
            "is missing",
        ),
        ({"input": 3}, "input", "expected str or list"),
        ({"target": {"a": 1}}, "target", "expected str or a list of str"),
        ({"scores": {"match": "C"}}, "scores.match", "expected an object"),
    ],
)
def test_malformed_sample_names_its_field(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    path = write_json(tmp_path / "log.json", log([sample(1), sample(2, **change), sample(3)]))

    results = list(parse(path))

    error = results[1]
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("record 1", field)
    assert message in error.message
    assert [r.external_id for r in results if isinstance(r, ParsedTrajectory)] == [
        "E1:1:1",
        "E1:3:1",
    ]


def test_eval_member_that_is_not_json_is_a_record_error(tmp_path: Path) -> None:
    path = write_eval(
        tmp_path / "log.eval",
        eval_members(
            {
                "samples/1_epoch_1.json": sample(1),
                "samples/2_epoch_1.json": "{not json",
                "samples/3_epoch_1.json": sample(3, messages="none"),
                "summaries.json": [],
            }
        ),
    )

    first, broken, wrong = list(parse(path))

    assert isinstance(first, ParsedTrajectory)
    assert first.external_id == "E1:1:1"
    assert isinstance(broken, RecordError)
    assert (broken.location, broken.field) == ("samples/2_epoch_1.json", "")
    assert "not valid JSON" in broken.message
    assert wrong == RecordError("samples/3_epoch_1.json", "messages", "expected list, got str")


def test_unfinished_eval_reads_the_journal_header(tmp_path: Path) -> None:
    start = log([])
    del start["samples"]
    path = write_eval(
        tmp_path / "log.eval",
        {"_journal/start.json": start, "samples/a_epoch_1.json": sample("a")},
    )

    [trajectory] = trajectories(path)

    assert trajectory.external_id == "E1:a:1"


def test_zip_that_is_not_an_inspect_log_is_a_file_error(tmp_path: Path) -> None:
    path = write_eval(tmp_path / "other.eval", {"README.md": "hello", "data.json": [1]})

    with pytest.raises(FileError, match=r"not an Inspect log: the zip has no header\.json"):
        list(parse(path))


def test_eval_header_that_is_not_json_is_a_file_error(tmp_path: Path) -> None:
    path = write_eval(
        tmp_path / "log.eval", {"header.json": "{oops", "samples/1_epoch_1.json": sample()}
    )

    with pytest.raises(FileError, match=r"not an Inspect log: header\.json not valid JSON"):
        list(parse(path))


def test_zip_bomb_is_refused_before_reading(tmp_path: Path) -> None:
    # 8 MiB of one byte deflates to about 8 KiB: a ratio near 1000:1.
    members = eval_members({"samples/1_epoch_1.json": b" " * (8 * 1024 * 1024)})
    path = write_eval(tmp_path / "bomb.eval", members)

    with pytest.raises(FileError, match=r"member samples/1_epoch_1\.json would expand to 8388608"):
        list(parse(path))


def test_member_above_the_size_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inspect_ai, "MAX_MEMBER_BYTES", 100)
    path = write_eval(tmp_path / "big.eval", eval_members({"samples/1_epoch_1.json": sample()}))

    with pytest.raises(FileError, match=r"possible zip bomb"):
        list(parse(path))


def test_truncated_archive_is_a_file_error(tmp_path: Path) -> None:
    whole = POPULARITY_EVAL.read_bytes()
    path = tmp_path / "cut.eval"
    path.write_bytes(whole[: len(whole) // 2])

    with pytest.raises(FileError, match=r"cut\.eval: not a readable zip archive"):
        list(parse(path))


def test_json_that_is_not_a_log_is_a_file_error(tmp_path: Path) -> None:
    array = write_json(tmp_path / "a.json", [sample()])
    broken = tmp_path / "b.json"
    broken.write_text('{"eval": {"task": "x"}, "status": "success", "samples": [{"id": 1,')

    with pytest.raises(FileError, match=r"a\.json: not an Inspect log"):
        list(parse(array))
    with pytest.raises(
        FileError, match=r"b\.json: not valid JSON at record 0: .*\(line 1, column \d+\)"
    ):
        list(parse(broken))
