"""Streamed reading of record files: which shape a file is read as, where each record is,
and which damage breaks one record and which the whole file."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from trajectories.formats import jsonstream
from trajectories.formats.base import FileError, RecordError


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        text = text.encode("utf-8")
    path.write_bytes(text)
    return path


def test_array_items_are_records(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", '\ufeff  [{"a": 1.5}, 2, "x"]')

    assert list(jsonstream.iter_records(path)) == [
        ("record 0", {"a": 1.5}),
        ("record 1", 2),
        ("record 2", "x"),
    ]


def test_json_lines_count_every_line(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '{"a": 1}\n\n{"a": "\u2028"}\r\n')

    assert list(jsonstream.iter_records(path)) == [
        ("line 1", {"a": 1}),
        ("line 3", {"a": "\u2028"}),
    ]


def test_pretty_printed_object_is_one_record(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", json.dumps({"a": [1, 2]}, indent=2))

    assert list(jsonstream.iter_records(path)) == [("record 0", {"a": [1, 2]})]


def test_bad_line_after_a_good_one_is_a_record_error(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", b'{"a": 1}\n{"a": NaN}\n"\xff"\n[1]\n')

    good, nan, not_utf8, array = list(jsonstream.iter_records(path))

    assert good == ("line 1", {"a": 1})
    assert isinstance(nan, RecordError)
    assert (nan.location, nan.field) == ("line 2", "")
    assert "NaN is not a JSON value" in nan.message
    assert not_utf8 == RecordError("line 3", "", "is not UTF-8 text (invalid start byte at byte 1)")
    # Whether a record may be a list is the format's call, not the reader's.
    assert array == ("line 4", [1])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"a\.json: is empty"),
        ("  \n ", r"a\.json: is empty"),
        (
            "id,task\n",
            r"expected a JSON array, a JSON object or JSON Lines; the file starts with 'i'",
        ),
        (b"\xff\xfe", r"the file starts with byte 0xff"),
        ('{"a": 1,\n "b": }', r"a\.json: not valid JSON: .* \(line 2, column 7\)"),
        ("[1, 2", r"a\.json: not valid JSON at record 2: Expecting .* \(line 1, column 6\)"),
        ("[1, NaN]", r"a\.json: not valid JSON at record 1: lexical error"),
        ("[1] [2]", r"a\.json: not valid JSON at record 1: Extra data \(line 1, column 5\)"),
        # ijson's C parser lets an overlong encoding through; Python does not.
        (b'[{"\xc0\x80": 1}]', r"not valid JSON at record 0: invalid UTF-8 \(invalid start"),
    ],
)
def test_file_errors(tmp_path: Path, text: str | bytes, message: str) -> None:
    path = write(tmp_path / "a.json", text)

    with pytest.raises(FileError, match=message):
        list(jsonstream.iter_records(path))


def test_first_line_that_is_not_an_object_is_a_file_error(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", '[1]\n{"a": 1}\n')

    with pytest.raises(FileError, match=r"line 1 holds a list, expected one JSON object per line"):
        list(jsonstream.iter_lines(path))


def test_missing_file_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(FileError, match=r"nope\.json: cannot be read"):
        list(jsonstream.iter_records(tmp_path / "nope.json"))


def test_nested_array_value_and_kind(tmp_path: Path) -> None:
    data: dict[str, Any] = {"head": {"n": 1}, "body": {"rows": [{"a": 1}, {"a": 2}]}, "s": "x"}
    path = write(tmp_path / "a.json", json.dumps(data))

    assert list(jsonstream.iter_array(path, ("body", "rows"))) == [
        ("record 0", {"a": 1}),
        ("record 1", {"a": 2}),
    ]
    assert jsonstream.value_at(path, ("head",)) == {"n": 1}
    assert jsonstream.value_at(path, ("tail",)) is jsonstream.MISSING
    assert jsonstream.kind_at(path, ("body", "rows")) == "array"
    assert jsonstream.kind_at(path, ("body",)) == "object"
    assert jsonstream.kind_at(path, ("s",)) == "string"
    assert jsonstream.kind_at(path, ("head", "n")) == "number"
    assert jsonstream.kind_at(path, ("nothing",)) is None


@pytest.mark.parametrize("shape", ["array", "lines"])
def test_large_file_is_streamed_in_bounded_memory(tmp_path: Path, shape: str) -> None:
    record = {"task": "t" * 200, "steps": ["s" * 300] * 10}
    lines = (json.dumps({**record, "id": n}) for n in range(5000))
    path = tmp_path / "big.json"
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[" + ",".join(lines) + "]" if shape == "array" else "\n".join(lines))
    assert path.stat().st_size > 15_000_000

    tracemalloc.start()
    count = sum(1 for _ in jsonstream.iter_records(path))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    assert count == 5000
    # Loading the file whole would take several times its 16 MB size.
    assert peak < 2_000_000
