"""Reading record files without loading them whole: JSON Lines line by line, and JSON
arrays (at the top of the file or inside one JSON object) item by item with ijson.

The rules are :mod:`jsonio`'s: UTF-8 with an optional byte-order mark, and no NaN or
Infinity. Records come out as ``(location, value)``, where the location is ``line N``
(1-based, counting blank lines) in JSON Lines and ``record N`` (0-based) in an array.

What breaks one record and what breaks the file follow the Stepscope JSONL parser: in
JSON Lines, a first record that is not a JSON object means the file is something else,
so that is a FileError, while a bad line after a good one is a RecordError and the lines
after it still parse. An array cannot resume after a syntax error, so any error inside
one is a FileError naming the record where reading stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import ijson

from trajectories.formats import jsonio
from trajectories.formats.base import FieldError, FileError, ParsedTrajectory, RecordError

# One record of a file: where it is and its decoded value, or the error for a line that
# could not be decoded.
Entry = tuple[str, Any] | RecordError

BOM = b"\xef\xbb\xbf"
WHITESPACE = b" \t\r\n"
# What ijson raises on bad input: its own errors, and UnicodeDecodeError for bytes its C
# parser lets through but Python cannot decode (an overlong "\xc0\x80" in a key).
STREAM_ERRORS = (ijson.JSONError, UnicodeDecodeError)
# What is missing from a JSON document, as opposed to a JSON null.
MISSING: Any = object()


def iter_records(path: Path) -> Iterator[Entry]:
    """The records of a JSON array, a single JSON object, or JSON Lines.

    The first character that is not white space decides: ``[`` is an array; ``{`` is
    JSON Lines when the first line is a JSON value on its own, otherwise one (usually
    pretty-printed) object, reported as ``record 0``.
    """
    first = first_byte(path)
    if first == b"[":
        yield from iter_array(path)
    elif first == b"{":
        if _first_line_is_json(path):
            yield from iter_lines(path)
        else:
            yield "record 0", load_file(path)
    elif not first:
        raise FileError(f"{path}: is empty")
    else:
        raise FileError(
            f"{path}: expected a JSON array, a JSON object or JSON Lines; "
            f"the file starts with {_describe(first)}"
        )


def iter_lines(path: Path) -> Iterator[Entry]:
    """One JSON value per non-blank line, read line by line."""
    with _open(path) as handle:
        seen_record = False
        for number, raw_line in enumerate(handle, start=1):
            location = f"line {number}"
            try:
                # Iterating over bytes splits on b"\n" only, so characters such as U+2028
                # that may appear unescaped inside JSON strings do not end a line.
                text = raw_line.decode("utf-8")
            except UnicodeDecodeError as error:
                message = f"is not UTF-8 text ({error.reason} at byte {error.start})"
                if not seen_record:
                    raise FileError(f"{path}: {location} {message}") from error
                yield RecordError(location, "", message)
                continue
            if not text.strip():
                continue
            try:
                value = loads(text)
            except ValueError as error:
                message = f"not valid JSON: {jsonio.error_message(error)}"
                if not seen_record:
                    raise FileError(f"{path}: {location} is {message}") from error
                yield RecordError(location, "", message)
                continue
            if not seen_record and not isinstance(value, dict):
                raise FileError(
                    f"{path}: {location} holds a {type(value).__name__}, "
                    "expected one JSON object per line"
                )
            seen_record = True
            yield location, value


def iter_array(path: Path, keys: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """The items of the array at ``keys`` (object keys from the top of the file; none
    for a top-level array), one at a time. Nothing is yielded when there is no array
    there; :func:`kind_at` tells the two apart."""
    prefix = ".".join([*keys, "item"])
    count = 0
    with _open(path) as handle:
        try:
            for value in ijson.items(handle, prefix, use_float=True):
                yield f"record {count}", value
                count += 1
        except STREAM_ERRORS as error:
            detail = _position(path) or _ijson_message(error)
            raise FileError(f"{path}: not valid JSON at record {count}: {detail}") from error


# Files up to this size are read again whole on a syntax error, for a line and column.
POSITION_RECHECK_BYTES = 64 * 1024 * 1024


def _position(path: Path) -> str:
    """ijson does not say where a syntax error is; for files that are not huge, the
    standard parser does: its message with line and column, or "" if it has none."""
    if path.stat().st_size > POSITION_RECHECK_BYTES:
        return ""
    try:
        jsonio.loads(path.read_bytes().removeprefix(BOM))
    except json.JSONDecodeError as error:
        return f"{error.msg} (line {error.lineno}, column {error.colno})"
    except ValueError:
        return ""
    return ""


def value_at(path: Path, keys: tuple[str, ...]) -> Any:
    """The first value at ``keys`` (object keys from the top of the file), reading only
    as far as its end, or :data:`MISSING`."""
    with _open(path) as handle:
        try:
            return next(ijson.items(handle, ".".join(keys), use_float=True), MISSING)
        except STREAM_ERRORS as error:
            raise FileError(f"{path}: not valid JSON: {_ijson_message(error)}") from error


def kind_at(path: Path, keys: tuple[str, ...]) -> str | None:
    """The JSON type at ``keys`` ("array", "object", "string", "number", "boolean" or
    "null"), or None when the file has nothing there."""
    target = ".".join(keys)
    kinds = {"start_array": "array", "start_map": "object", "integer": "number"}
    with _open(path) as handle:
        try:
            for prefix, event, _ in ijson.parse(handle, use_float=True):
                if prefix == target and event not in ("map_key", "end_map", "end_array"):
                    return kinds.get(event, event)
        except STREAM_ERRORS as error:
            raise FileError(f"{path}: not valid JSON: {_ijson_message(error)}") from error
    return None


def loads(text: str | bytes) -> Any:
    """:func:`jsonio.loads`, with nesting too deep for Python's parser reported as a
    ValueError like any other bad JSON."""
    try:
        return jsonio.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load_file(path: Path) -> Any:
    """The whole file as one JSON value (for files that hold one record), or FileError."""
    text = jsonio.read_text(path)
    try:
        return loads(text)
    except ValueError as error:
        raise jsonio.file_error(path, error) from error


def _open(path: Path) -> IO[bytes]:
    """``path`` opened for reading bytes, past a UTF-8 byte-order mark if it has one."""
    try:
        handle = path.open("rb")
    except OSError as error:
        raise FileError(f"{path}: cannot be read: {error.strerror}") from error
    if handle.read(len(BOM)) != BOM:
        handle.seek(0)
    return handle


def first_byte(path: Path) -> bytes:
    with _open(path) as handle:
        while chunk := handle.read(65536):
            stripped = chunk.lstrip(WHITESPACE)
            if stripped:
                return stripped[:1]
    return b""


def _first_line_is_json(path: Path) -> bool:
    with _open(path) as handle:
        for line in handle:
            if line.strip(WHITESPACE):
                try:
                    loads(line.decode("utf-8"))
                except ValueError:  # UnicodeDecodeError included
                    return False
                return True
    return False


def _describe(first: bytes) -> str:
    return repr(first.decode()) if first.isascii() else f"byte 0x{first.hex()}"


def _ijson_message(error: Exception) -> str:
    """The first line of ijson's message; the rest is a drawing of where it stopped."""
    if isinstance(error, UnicodeDecodeError):
        return f"invalid UTF-8 ({error.reason})"
    message = error.args[0] if error.args else str(error)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    return str(message).strip().split("\n")[0]


def records_built(
    path: Path, build: Callable[[Any, str], ParsedTrajectory]
) -> Iterator[ParsedTrajectory | RecordError]:
    """Each record of ``path`` (see :func:`iter_records`) made a trajectory by ``build``
    (record, location); a record it refuses with a FieldError comes out as a RecordError
    naming the record's location and the field."""
    for entry in iter_records(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            yield build(record, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
