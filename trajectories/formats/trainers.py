"""What the RL trainer formats (``verl``, ``rllm``, ``art``, ``trl-completions``) share
(no Django): checked numbers, the task key that makes one prompt's rollouts a task
group, and reading a Parquet file row by row with each row's location.

A trainer's rollouts of one prompt are a GRPO/RLOO group. Where the trainer names the
group (rLLM's task id, verl's ``uid``, ART's group) that name is the task key; where it
does not (TRL's table, verl's plain dump) the key is a digest of the prompt text, so
every rollout of a prompt shares it, whichever file or step it came from.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats.base import FieldError, FileError


def prompt_key(prefix: str, prompt: str) -> str:
    """``<prefix>:<16 hex digits of the prompt's sha256>``: equal for equal prompts."""
    digest = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{prefix}:{digest}"


def number(value: Any, field: str, *, nan_is_none: bool = False) -> float:
    """``value`` as a finite float, or FieldError naming ``field``. ``bool`` is not a
    number here. NaN is None's stand-in in some tables (TRL writes NaN for a reward
    function that did not score a row): with ``nan_is_none`` the caller gets NaN back
    and treats it as unknown."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(field, f"expected a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) and nan_is_none:
        return value
    if not math.isfinite(value):
        raise FieldError(field, f"is {value}; expected a finite number")
    return value


def optional_number(record: dict[str, Any], key: str, path: str = "") -> float | None:
    """``record[key]`` as a finite float; None when absent, null or NaN."""
    value = record.get(key)
    if value is None:
        return None
    checked = number(value, f"{path}.{key}" if path else key, nan_is_none=True)
    return None if math.isnan(checked) else checked


def integer(value: Any, field: str) -> int:
    """``value`` as an int (a float with no fraction, as Parquet and pandas may write
    one, passes), or FieldError naming ``field``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(field, f"expected an integer, got {type(value).__name__}")
    return value


def scalar(value: Any) -> bool:
    """Whether ``value`` is a JSON scalar PostgreSQL can store (finite numbers only)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


def storable_text(text: str) -> tuple[str, int]:
    """``text`` with what PostgreSQL cannot store (NUL, lone surrogates) replaced by
    U+FFFD, and how many characters were; the caller marks the count on the step."""
    replaced = 0
    if "\x00" in text:
        replaced += text.count("\x00")
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            kept = []
            for character in text:
                if "\ud800" <= character <= "\udfff":
                    kept.append("\ufffd")
                    replaced += 1
                else:
                    kept.append(character)
            text = "".join(kept)
    return text, replaced


def parquet_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(location, row)`` for each row of a Parquet file, ``row N`` (0-based), read a
    batch at a time so a large file never sits in memory whole. FileError when the file
    is not Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as error:
        raise FileError(f"{path}: not a Parquet file: {error}") from error
    number_ = 0
    try:
        for batch in handle.iter_batches(batch_size=512):
            for row in batch.to_pylist():
                yield f"row {number_}", row
                number_ += 1
    except (OSError, pa.ArrowInvalid) as error:
        raise FileError(f"{path}: row {number_} cannot be read: {error}") from error


def parquet_columns(path: Path) -> list[str]:
    """The column names of a Parquet file, or FileError when it is not one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except (OSError, pa.ArrowInvalid) as error:
        raise FileError(f"{path}: not a Parquet file: {error}") from error
