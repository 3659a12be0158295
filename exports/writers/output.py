"""Writing records to files, deterministically and atomically (no Django).

- JSON Lines: one record per line, keys in the order the builder made them,
  ``ensure_ascii=False``, compact separators, ``"\\n"`` line ends. NaN and Infinity are
  refused (they are not JSON). A JSON array file (``json``) holds the same records as
  ``[\\n{...},\\n{...}\\n]\\n``, for formats whose importers read arrays (ProcessBench).
- gzip: the gzip header's time is 0 and its file name empty, so the same records give
  the same bytes.
- Parquet (pyarrow): an explicit schema per output, rows buffered and written a row group
  at a time (memory is bounded by ``row_group_size`` rows and about ``ROW_GROUP_BYTES``
  of text per file), zstd at a fixed level. pyarrow
  writes its own version into the footer (``created_by``) and cannot be told otherwise,
  so bytes are identical for one pyarrow version; the manifest records the version.

Every writer writes to a hidden temporary file in the target directory. ``finish`` closes
it and hashes it; ``commit`` renames it to its name (atomic on one file system);
``abort``, or an exception inside ``with``, removes it, so a failed write leaves no file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

Container = Literal["jsonl", "json", "parquet"]
CONTAINERS: tuple[Container, ...] = ("jsonl", "json", "parquet")
EXTENSIONS: dict[Container, str] = {"jsonl": ".jsonl", "json": ".json", "parquet": ".parquet"}
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
DEFAULT_ROW_GROUP_SIZE = 10_000
# A row group is also closed once its rows hold about this much text, so exports of long
# trajectories (SFT messages, agent tool outputs) stay bounded too.
ROW_GROUP_BYTES = 64 << 20
# Encoded lines are gathered into chunks of about this size before each write.
CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class WrittenFile:
    path: Path
    rows: int
    sha256: str
    size: int


class RecordWriter(Protocol):
    path: Path
    rows: int

    def write(self, record: Mapping[str, Any]) -> None: ...
    def finish(self) -> None: ...
    def commit(self) -> WrittenFile: ...
    def abort(self) -> None: ...


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def encode_json(record: Mapping[str, Any]) -> str:
    try:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as error:
        raise ValueError(f"record is not valid JSON ({error}): {str(record)[:200]}") from error


class _AtomicFile:
    """A temporary file beside ``path`` that becomes ``path`` on commit."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temp_name = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".part"
        )
        os.close(descriptor)
        self.temp_path = Path(temp_name)
        self.rows = 0
        self._sha256 = ""
        self._finished = False
        self._done = False

    def _close(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        if self._finished:
            return
        self._close()
        # mkstemp makes the file private; an export is read by the web process too.
        os.chmod(self.temp_path, 0o644)
        self._sha256 = sha256_of(self.temp_path)
        self._finished = True

    def commit(self) -> WrittenFile:
        try:
            self.finish()
            os.replace(self.temp_path, self.path)
        except BaseException:
            self.abort()
            raise
        self._done = True
        return WrittenFile(self.path, self.rows, self._sha256, self.path.stat().st_size)

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            if not self._finished:
                self._close()
        finally:
            self.temp_path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


class JsonRecordWriter(_AtomicFile):
    """JSON Lines, or a JSON array with ``array=True``; gzip-compressed with ``gzip``."""

    def __init__(self, path: Path, *, array: bool = False, compress: bool = False) -> None:
        super().__init__(path)
        self.array = array
        self._raw = self.temp_path.open("wb")
        self._stream: Any = self._raw
        if compress:
            self._stream = gzip.GzipFile(
                filename="", mode="wb", fileobj=self._raw, compresslevel=GZIP_LEVEL, mtime=0
            )
        self._chunk: list[str] = []
        self._chunk_size = 0
        self._closed = False

    def write(self, record: Mapping[str, Any]) -> None:
        self.write_encoded(encode_json(record))

    def write_encoded(self, text: str) -> None:
        """A record already encoded as :func:`encode_json` encodes it (one line)."""
        if self.array:
            text = ("[\n" if self.rows == 0 else ",\n") + text
        else:
            text += "\n"
        self._chunk.append(text)
        self._chunk_size += len(text)
        self.rows += 1
        if self._chunk_size >= CHUNK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._chunk:
            self._stream.write("".join(self._chunk).encode("utf-8"))
            self._chunk.clear()
            self._chunk_size = 0

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.array:
                self._chunk.append("[]\n" if self.rows == 0 else "\n]\n")
            self._flush()
            if self._stream is not self._raw:
                self._stream.close()
            self._raw.flush()
            os.fsync(self._raw.fileno())
        finally:
            self._raw.close()


class ParquetRecordWriter(_AtomicFile):
    """Parquet with ``schema``; each record's keys must be the schema's columns."""

    def __init__(
        self, path: Path, schema: pa.Schema, *, row_group_size: int = DEFAULT_ROW_GROUP_SIZE
    ) -> None:
        if row_group_size < 1:
            raise ValueError(f"row_group_size is {row_group_size}; expected at least 1")
        super().__init__(path)
        self.schema = schema
        self.row_group_size = row_group_size
        self._columns = list(schema.names)
        self._column_set = set(self._columns)
        # The row group's size is estimated from the text columns' lengths, the nested
        # columns walked, and 8 bytes for every other column.
        self._text_columns = [f.name for f in schema if pa.types.is_string(f.type)]
        self._nested_columns = [f.name for f in schema if pa.types.is_nested(f.type)]
        others = len(self._columns) - len(self._text_columns) - len(self._nested_columns)
        self._scalar_bytes = 8 * others
        self._rows: list[Mapping[str, Any]] = []
        self._buffered = 0
        # Rows given as tables (write_table) that do not fill a row group yet.
        self._pending: pa.Table | None = None
        self._pending_sizes = np.zeros(0, dtype=np.int64)
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(
            str(self.temp_path),
            schema,
            compression="zstd",
            compression_level=ZSTD_LEVEL,
            use_dictionary=True,
            write_statistics=True,
            store_schema=True,
        )

    def write(self, record: Mapping[str, Any]) -> None:
        # Columns are picked by name, so a key the schema lacks would be dropped without a
        # word; a builder and its schema that drift apart must fail here instead.
        if record.keys() != self._column_set:
            raise ValueError(
                f"record keys {list(record)} do not match the schema's columns {self._columns}"
            )
        self._rows.append(record)
        size = self._scalar_bytes
        for name in self._text_columns:
            text = record[name]
            if text is not None:
                size += len(text)
        for name in self._nested_columns:
            size += _approximate_size(record[name])
        self._buffered += size
        self.rows += 1
        if len(self._rows) >= self.row_group_size or self._buffered >= ROW_GROUP_BYTES:
            self._flush()

    def write_table(self, table: pa.Table) -> None:
        """Rows already in columns (an export built column by column), cut into row groups
        exactly where :meth:`write` would cut the same rows, so both give the same bytes.
        For schemas without nested columns (``write`` sizes those by walking Python
        values); a writer takes its rows one way or the other, not both."""
        if self._nested_columns:
            raise ValueError("write_table takes schemas without nested columns")
        if self._rows:
            raise ValueError("this writer already holds rows given one at a time")
        table = table.select(self._columns).cast(self.schema)
        sizes = np.full(table.num_rows, self._scalar_bytes, dtype=np.int64)
        for name in self._text_columns:
            lengths = pc.fill_null(pc.utf8_length(table.column(name)), 0)
            sizes += lengths.to_numpy(zero_copy_only=False)
        self.rows += table.num_rows
        pending = table if self._pending is None else pa.concat_tables([self._pending, table])
        pending_sizes = np.concatenate([self._pending_sizes, sizes])
        while pending.num_rows:
            # write() closes a group after the row that brings it to row_group_size rows
            # or to ROW_GROUP_BYTES of estimated size, whichever comes first.
            over = np.flatnonzero(np.cumsum(pending_sizes) >= ROW_GROUP_BYTES)
            cut = min(self.row_group_size, int(over[0]) + 1 if len(over) else pending.num_rows + 1)
            if cut > pending.num_rows:
                break
            assert self._writer is not None
            self._write_group(self._writer, pending.slice(0, cut))
            pending, pending_sizes = pending.slice(cut), pending_sizes[cut:]
        self._pending, self._pending_sizes = pending, pending_sizes

    def _write_group(self, writer: pq.ParquetWriter, table: pa.Table) -> None:
        # One chunk per column, as the tables write() builds: pages follow chunks.
        writer.write_table(table.combine_chunks(), row_group_size=self.row_group_size)

    def _flush(self) -> None:
        if self._rows and self._writer is not None:
            self._writer.write_table(self._table(), row_group_size=self.row_group_size)

    def _table(self) -> pa.Table:
        """The buffered rows as a table (and the buffer emptied). Built column by column:
        several times faster than ``Table.from_pylist`` on the same rows."""
        rows, self._rows = self._rows, []
        self._buffered = 0
        columns = {name: [row[name] for row in rows] for name in self._columns}
        return pa.Table.from_pydict(columns, schema=self.schema)

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            if self._rows:
                writer.write_table(self._table(), row_group_size=self.row_group_size)
            if self._pending is not None and self._pending.num_rows:
                self._write_group(writer, self._pending)
        finally:
            writer.close()


_SCALARS = (int, float, bool, type(None))


def _approximate_size(value: Any) -> int:
    """Characters of text in ``value``, plus 8 per scalar: enough to bound a row group.
    (Called on every row: exact type checks first, the abstract ones only for the rest.)"""
    kind = type(value)
    if kind is str:
        return len(value)
    if kind in _SCALARS:
        return 8
    items: Iterable[Any]
    if kind is dict:
        items = value.values()
    elif kind is list or kind is tuple:
        items = value
    elif isinstance(value, Mapping):
        items = value.values()
    elif isinstance(value, list | tuple):
        items = value
    elif isinstance(value, str | bytes):
        return len(value)
    else:
        return 8
    size = 0
    for item in items:
        kind = type(item)
        if kind is str:
            size += len(item)
        elif kind in _SCALARS:
            size += 8
        else:
            size += _approximate_size(item)
    return size


def open_writer(
    path: Path,
    container: Container,
    *,
    schema: pa.Schema | None = None,
    compress: bool = False,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
) -> JsonRecordWriter | ParquetRecordWriter:
    if container == "parquet":
        if schema is None:
            raise ValueError("a Parquet file needs a schema")
        if compress:
            raise ValueError("Parquet compresses its own columns; gzip applies to JSON only")
        return ParquetRecordWriter(path, schema, row_group_size=row_group_size)
    if container in ("jsonl", "json"):
        return JsonRecordWriter(path, array=container == "json", compress=compress)
    raise ValueError(f"unknown container {container!r}; expected one of {', '.join(CONTAINERS)}")


def write_records(
    path: Path,
    records: Iterable[Mapping[str, Any]],
    container: Container,
    *,
    schema: pa.Schema | None = None,
    compress: bool = False,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
) -> WrittenFile:
    """Write ``records`` to ``path`` as they stream in; all or nothing."""
    writer = open_writer(
        path, container, schema=schema, compress=compress, row_group_size=row_group_size
    )
    try:
        for record in records:
            writer.write(record)
    except BaseException:
        writer.abort()
        raise
    return writer.commit()


def write_json_file(path: Path, value: Any) -> WrittenFile:
    """One pretty-printed JSON value (a manifest), keys sorted, atomically."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2, allow_nan=False) + "\n"
    target = _TextFile(Path(path), text)
    return target.commit()


class _TextFile(_AtomicFile):
    def __init__(self, path: Path, text: str) -> None:
        super().__init__(path)
        try:
            with self.temp_path.open("w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        except BaseException:
            self.temp_path.unlink(missing_ok=True)
            raise
        self.rows = 1

    def _close(self) -> None:
        pass
