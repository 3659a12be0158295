"""Reading JSON the way every parser needs it: strict (no NaN or Infinity, which
PostgreSQL's jsonb cannot store), UTF-8 with an optional byte-order mark, and errors that
name the file and position."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trajectories.formats.base import FileError


def read_text(path: Path) -> str:
    try:
        # utf-8-sig drops a byte-order mark that some editors put at the start.
        return path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise FileError(f"{path}: cannot be read: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise FileError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from error


def loads(text: str | bytes) -> Any:
    """``json.loads`` that rejects NaN and Infinity; raises ValueError, also for nesting
    too deep for Python's parser (a RecursionError would end the whole import)."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def load_file(path: Path) -> Any:
    """The whole file as one JSON value, or FileError with line and column."""
    return load_text(path, read_text(path))


def load_text(path: Path, text: str) -> Any:
    """``text`` (read from ``path``) as one JSON value, or FileError naming the file."""
    try:
        return loads(text)
    except ValueError as error:
        raise file_error(path, error) from error


def file_error(path: Path, error: ValueError) -> FileError:
    if isinstance(error, json.JSONDecodeError):
        where = f" (line {error.lineno}, column {error.colno})"
        return FileError(f"{path}: not valid JSON: {error.msg}{where}")
    return FileError(f"{path}: not valid JSON: {error}")


def error_message(error: ValueError) -> str:
    """A short description of a JSON error inside one line or field."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at column {error.colno}"
    return str(error)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
