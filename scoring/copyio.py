"""PostgreSQL binary ``COPY`` to and from numpy arrays, for numeric columns (no Django).

Credit assignment reads a million steps' numbers and writes a million credits back. In
binary format a row of NOT NULL ``bigint``/``double precision`` columns has a fixed width,
so a whole result decodes with one ``np.frombuffer`` and a whole batch of credits encodes
with one structured-array assignment, with no Python per row. The queries that feed
:func:`decode` must not return NULLs (``COALESCE`` them to ``'NaN'`` or a sentinel); a
column written by :func:`encode` is either all values or all NULL.
"""

# Django-free: binary COPY on a plain connection.
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_HEADER = SIGNATURE + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
_TRAILER = b"\xff\xff"
# The binary COPY wire types this module handles: bigint and double precision.
_WIRE = {"int8": ">i8", "float8": ">f8"}


def _row_dtype(types: Sequence[str]) -> np.dtype:
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for number, name in enumerate(types):
        if name not in _WIRE:
            raise ValueError(f"unsupported column type {name!r}; expected int8 or float8")
        fields += [(f"len{number}", ">i4"), (f"col{number}", _WIRE[name])]
    return np.dtype(fields)


def decode(data: bytes | bytearray | memoryview, types: Sequence[str]) -> list[NDArray]:
    """The columns of a ``COPY (...) TO STDOUT (FORMAT binary)`` result, one native-endian
    array per column (``int8`` → int64, ``float8`` → float64)."""
    buffer = memoryview(data)
    if bytes(buffer[: len(SIGNATURE)]) != SIGNATURE:
        raise ValueError("not PostgreSQL binary COPY data")
    extension = int.from_bytes(buffer[15:19], "big", signed=False)
    body = buffer[19 + extension :]
    if bytes(body[-2:]) != _TRAILER:
        raise ValueError("binary COPY data without its trailer")
    body = body[:-2]
    dtype = _row_dtype(types)
    if len(body) % dtype.itemsize:
        raise ValueError("binary COPY rows are not fixed-width: a NULL or a wider column?")
    rows = np.frombuffer(body, dtype=dtype)
    if rows.size and np.any(rows["count"] != len(types)):
        raise ValueError(f"expected {len(types)} columns per row")
    out = []
    for number, name in enumerate(types):
        if rows.size and np.any(rows[f"len{number}"] != 8):
            raise ValueError(f"column {number} has NULLs; COALESCE them in the query")
        out.append(rows[f"col{number}"].astype(np.int64 if name == "int8" else np.float64))
    return out


def encode(columns: Sequence[tuple[str, NDArray | None]], rows: int) -> bytes:
    """Binary ``COPY ... FROM STDIN (FORMAT binary)`` data for ``rows`` rows. Each column
    is ``(type, values)``; ``values=None`` writes NULL in every row (any column type,
    e.g. a jsonb left empty)."""
    fields: list[tuple[str, str]] = [("count", ">i2")]
    for number, (name, values) in enumerate(columns):
        fields.append((f"len{number}", ">i4"))
        if values is not None:
            if name not in _WIRE:
                raise ValueError(f"unsupported column type {name!r} for values")
            fields.append((f"col{number}", _WIRE[name]))
    table = np.empty(rows, dtype=np.dtype(fields))
    table["count"] = len(columns)
    for number, (_, values) in enumerate(columns):
        if values is None:
            table[f"len{number}"] = -1
            continue
        array = np.asarray(values)
        if array.shape != (rows,):
            raise ValueError(f"column {number} needs {rows} values")
        table[f"len{number}"] = 8
        table[f"col{number}"] = array
    return _HEADER + table.tobytes() + _TRAILER
