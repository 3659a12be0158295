"""Preparing an import's chunks in a helper process: the same chunks as in this
process, the parser's errors carried back, and a helper that stops when the import does
or that dies is never taken for the end of the file."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tests.conftest import REALDATA
from tests.waiting import wait_until
from trajectories import prepare, synthetic
from trajectories.formats.base import FileError, ParsedStep, ParsedTrajectory, RecordError


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    path = tmp_path / "runs.jsonl"
    records = list(synthetic.rollouts(tasks=10, rollouts_per_task=2, seed=5))
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


@pytest.fixture
def helper_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", 0)
    monkeypatch.setattr(prepare, "CHUNK_TRAJECTORIES", 3)


def helpers() -> list[psutil.Process]:
    """This process's live helper processes. A child that has exited, or is a zombie not
    yet reaped (another test's subprocess, under xdist), is not one."""
    found = []
    for child in psutil.Process().children():
        try:
            if "trajectories.prepare_process" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return found


@pytest.mark.parametrize(
    ("source_format", "name"),
    [("stepscope", None), ("openai-messages", "tau_bench/gpt-4o-airline.json")],
)
def test_helper_gives_the_chunks_this_process_gives(
    runs: Path, monkeypatch: pytest.MonkeyPatch, source_format: str, name: str | None
) -> None:
    path = runs if name is None else REALDATA / name
    monkeypatch.setattr(prepare, "CHUNK_TRAJECTORIES", 3)
    monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", 1 << 40)
    with prepare.file_chunks(path, source_format) as chunks:
        here = list(chunks)
    monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", 0)
    with prepare.file_chunks(path, source_format) as chunks:
        assert helpers()
        there = list(chunks)
    assert len(here) > 3
    assert there == here


def test_long_steps_close_a_chunk_at_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk holds few records when their steps are long, whichever way it is made."""
    path = tmp_path / "long.jsonl"
    long_step = {"content": "x" * 100_000}
    records = [{"id": f"r{n}", "task": "t", "steps": [long_step] * 3} for n in range(10)]
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    monkeypatch.setattr(prepare, "CHUNK_BYTES", 500_000)
    for helper_from in (1 << 40, 0):
        monkeypatch.setattr(prepare, "HELPER_FROM_BYTES", helper_from)
        with prepare.file_chunks(path, "stepscope") as chunks:
            # 300 kB of rows a record: the second one passes the size.
            assert [len(chunk) for chunk in chunks] == [2, 2, 2, 2, 2]


@pytest.mark.usefixtures("helper_always")
def test_leaving_early_stops_the_helper(runs: Path) -> None:
    with prepare.file_chunks(runs, "stepscope") as chunks:
        assert len(next(chunks)) == 3
        assert len(helpers()) == 1
        assert read_ahead_threads()
    assert helpers() == []
    assert read_ahead_threads() == []


def read_ahead_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "import-read-ahead"]


def waiting_on_its_condition(thread: threading.Thread) -> bool:
    """Whether the reader thread is blocked in ``Condition.wait`` while reading frames:
    the only place it waits is where it holds back at its limit."""
    frame = sys._current_frames().get(thread.ident or 0)
    names = set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return {"wait", "_read_frames"} <= names


def test_reading_ahead_holds_back_at_its_limit() -> None:
    """Below one frame's size, the reader holds one frame at a time, and still hands on
    every frame in order, then None for the end of the pipe."""
    read_end, write_end = os.pipe()
    frames = [pickle.dumps(("chunk", [number] * 100)) for number in range(5)]
    with os.fdopen(write_end, "wb") as out:
        for frame in frames:
            out.write(len(frame).to_bytes(8, "big") + frame)
    with os.fdopen(read_end, "rb") as pipe:
        reader = prepare._ReadAhead(pipe, limit=1)
        assert wait_until(lambda: waiting_on_its_condition(reader._thread), timeout=30)
        assert len(reader._frames) == 1
        assert [reader.next() for _ in range(6)] == [*frames, None]
        reader.stop()


@pytest.mark.usefixtures("helper_always")
def test_a_helper_that_dies_is_an_error_not_a_short_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Larger than the pipe and the reader hold, so the helper is still writing when it
    # is killed.
    monkeypatch.setattr(prepare, "READ_AHEAD_BYTES", 1)
    path = tmp_path / "many.jsonl"
    records = synthetic.rollouts(tasks=600, rollouts_per_task=2, seed=5)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    assert path.stat().st_size > 1 << 20
    with prepare.file_chunks(path, "stepscope") as chunks:
        next(chunks)
        (helper,) = helpers()
        os.kill(helper.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="ended early"):
            list(chunks)


@pytest.mark.usefixtures("helper_always")
def test_the_parsers_file_error_comes_out_of_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "array.jsonl"
    path.write_text("[1, 2]\n")
    with (
        pytest.raises(FileError, match="not Stepscope JSONL"),
        prepare.file_chunks(path, "stepscope") as chunks,
    ):
        list(chunks)


@pytest.mark.usefixtures("helper_always")
def test_a_failure_in_the_helper_is_raised_with_its_traceback(runs: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="unknown format 'nope'"),
        prepare.file_chunks(runs, "nope") as chunks,
    ):
        list(chunks)


def test_unstorable_text_is_a_record_error_naming_the_field(tmp_path: Path) -> None:
    record = next(synthetic.rollouts(tasks=1, seed=6))
    record["steps"][2]["content"] = "nul \x00 here"
    path = tmp_path / "nul.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with prepare.file_chunks(path, "stepscope") as chunks:
        (chunk,) = list(chunks)
    (error,) = chunk
    assert isinstance(error, RecordError)
    assert (error.location, error.field) == ("line 1", "steps.2.content")


def test_chunks_end_at_their_step_limit() -> None:
    step = ParsedStep(kind="thought", role="assistant", content="x", labelable=True)
    records = [ParsedTrajectory(external_id=str(n), task="t", steps=[step]) for n in range(20)]
    chunks = prepare.prepared_chunks(
        iter(records), "stepscope", trajectories=100, steps=8, size=1 << 20
    )
    assert [len(chunk) for chunk in chunks] == [8, 8, 4]
