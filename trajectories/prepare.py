"""Turning a file's parsed trajectories into what the import writes (no Django): hashes,
step rows as COPY text, and the trajectory's own fields, in chunks of bounded size.

A large file is prepared in a helper process (``python -m trajectories.prepare_process``) that
streams the chunks back over a pipe: parsing, hashing and encoding are most of an
import's work in Python, and in a process of their own they run beside the importing
process and PostgreSQL instead of taking turns with them for one interpreter lock. A
small file (an API push) is prepared in the importing process, which saves starting one.
Both ways give the same chunks.
"""

# Django-free: it runs in the helper process.
from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import json
import pickle
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from trajectories import pgcopy
from trajectories.formats import parser_for
from trajectories.formats.base import FileError, ParsedTrajectory, ParseResult, RecordError
from trajectories.hashing import content_hash, prefix_hashes

# Trajectories and steps per chunk: the importing process writes a chunk with one round
# of COPY statements, so chunks bound its memory while keeping the rounds few.
CHUNK_TRAJECTORIES = 1000
CHUNK_STEPS = 4000
# And at most about this much prepared text, so a file of very long steps (or large
# source records) keeps chunks, and the importer's read-ahead of them, bounded too.
CHUNK_BYTES = 4 * 1024 * 1024
# Files at least this large are prepared in a helper process. Measured with
# `bench/ingest.py --helper-sweep`: at 8 MB both ways took 0.51 s; at 4 MB the helper's
# start (about 0.15 s) still cost more than it saved (0.33 s against 0.25), at 16 MB it
# saved 15% (0.82 s against 0.97).
HELPER_FROM_BYTES = 8 * 1024 * 1024


# The largest trajectory and texts the importer stores (docs/scaling.md, "Caps"). A record
# past one is refused, naming the field and by how much, never cut: ``--skip-invalid``
# imports the rest of the file. 100,000 steps is also the largest live trace
# (STEPSCOPE_OTLP_MAX_SPANS_PER_TRACE); a step's text loads on its page on demand past
# its first 2,000 characters.
TRAJECTORY_MAX_STEPS = 100_000
TEXT_MAX_CHARS = 4_000_000


@dataclasses.dataclass(slots=True)
class Prepared:
    """One trajectory, ready to write once it has an id."""

    digest: str
    location: str
    parent_external_id: str
    step_count: int
    # COPY rows of pgcopy.STEP_COLUMNS without the trajectory id (pgcopy.step_rows),
    # encoded: the importing process hands them on to PostgreSQL as they are.
    steps: bytes
    # The trajectory row's columns after the ones the importer knows (TRAJECTORY_FIELDS).
    fields: str
    # "location\traw JSON\n" for trajectory_source, or "" when there is no source record.
    source: str
    # (step index, annotator, value) of each label that came with the record.
    labels: list[tuple[int, str, int]]
    # The record's trajectory-level first error (-1: no step is wrong), or None.
    first_error_index: int | None = None
    # The record's decisive failure: (agent, step index or None, reason), or None.
    decisive: tuple[str, int | None, str] | None = None


# The trajectory columns in Prepared.fields; the importer writes the id, project, batch,
# source format and time before them.
TRAJECTORY_FIELDS = (
    "external_id, task_key, task, ground_truth, model_name, outcome_reward, success,"
    " metadata, step_count, content_hash, branch_index, policy_version, training_step"
)

Chunk = list[Prepared | RecordError]


def prepared_chunks(
    results: Iterable[ParseResult], source_format: str, *, trajectories: int, steps: int, size: int
) -> Iterator[Chunk]:
    """The parser's results, prepared, in chunks of at most ``trajectories`` records,
    ``steps`` steps or (about) ``size`` bytes of prepared rows, whichever comes first. A
    record holding text PostgreSQL cannot store (NUL, lone surrogates) becomes a
    RecordError naming the field."""
    chunk: Chunk = []
    counted = written = 0
    for result in results:
        if isinstance(result, ParsedTrajectory):
            item = prepared(result, source_format)
            chunk.append(item)
            if isinstance(item, Prepared):
                counted += item.step_count
                written += len(item.steps) + len(item.fields) + len(item.source)
        else:
            chunk.append(result)
        if len(chunk) >= trajectories or counted >= steps or written >= size:
            yield chunk
            chunk, counted, written = [], 0, 0
    if chunk:
        yield chunk


def prepared(record: ParsedTrajectory, source_format: str) -> Prepared | RecordError:
    refused = past_caps(record)
    if refused is not None:
        return refused
    try:
        hashes = prefix_hashes(record.task, record.steps)
        digest = content_hash(record, source_format, step_hashes=hashes)
        steps = pgcopy.step_rows(record.steps, hashes).encode()
        fields = pgcopy.row(
            (
                record.external_id,
                record.task_key,
                record.task,
                record.ground_truth,
                record.model_name,
                record.outcome_reward,
                record.success,
                pgcopy.Json(record.metadata),
                len(record.steps),
                digest,
                record.branch_index,
                record.policy_version or "",
                record.training_step,
            )
        )
        source = ""
        if record.raw is not None:
            source = pgcopy.row((record.location[:100], pgcopy.Json(record.raw)))
    except ValueError:  # NUL or a lone surrogate: PostgreSQL cannot store it
        return unstorable(record)
    return Prepared(
        digest=digest,
        location=record.location,
        parent_external_id=record.parent_external_id,
        step_count=len(record.steps),
        steps=steps,
        fields=fields,
        source=source,
        labels=[(label.step_index, label.annotator, label.value) for label in record.labels],
        first_error_index=record.first_error_index,
        decisive=(
            (record.decisive.agent, record.decisive.step_index, record.decisive.reason)
            if record.decisive is not None
            else None
        ),
    )


def past_caps(record: ParsedTrajectory) -> RecordError | None:
    """The first cap the record passes (``TRAJECTORY_MAX_STEPS``, ``TEXT_MAX_CHARS``),
    said with the field and by how much; None within them."""
    count = len(record.steps)
    if count > TRAJECTORY_MAX_STEPS:
        return RecordError(
            record.location,
            "steps",
            f"has {count:,} steps, {count - TRAJECTORY_MAX_STEPS:,} past the cap of"
            f" {TRAJECTORY_MAX_STEPS:,} steps a trajectory may have",
        )
    # On every record of every import: a length per text, nothing built unless one is over.
    if len(record.task) > TEXT_MAX_CHARS:
        return _text_past_cap(record, "task", record.task)
    if len(record.ground_truth) > TEXT_MAX_CHARS:
        return _text_past_cap(record, "ground_truth", record.ground_truth)
    for n, step in enumerate(record.steps):
        if len(step.content) > TEXT_MAX_CHARS:
            return _text_past_cap(record, f"steps.{n}.content", step.content)
    return None


def _text_past_cap(record: ParsedTrajectory, name: str, text: str) -> RecordError:
    return RecordError(
        record.location,
        name,
        f"is {len(text):,} characters, {len(text) - TEXT_MAX_CHARS:,} past the cap of"
        f" {TEXT_MAX_CHARS:,} characters a text may have",
    )


def unstorable(record: ParsedTrajectory) -> RecordError:
    """Name the first field holding text PostgreSQL cannot store (NUL, lone surrogates)."""
    candidates: list[tuple[str, Any]] = [
        ("id", record.external_id),
        ("task", record.task),
        ("task_key", record.task_key),
        ("ground_truth", record.ground_truth),
        ("model", record.model_name),
        ("metadata", record.metadata),
        ("training.policy_version", record.policy_version),
    ]
    for index, step in enumerate(record.steps):
        for name in ("kind", "role", "agent", "content", "tool_name", "tool_args", "metadata"):
            candidates.append((f"steps.{index}.{name}", getattr(step, name)))
        if step.training is not None:
            candidates.append(
                (f"steps.{index}.training.policy_version", step.training.policy_version)
            )
    candidates.append(("(source record)", record.raw))
    for name, value in candidates:
        if not _storable(value):
            return RecordError(record.location, name, "contains a NUL character or invalid Unicode")
    return RecordError(record.location, "", "contains text PostgreSQL cannot store")


def _storable(value: Any) -> bool:
    try:
        if isinstance(value, str):
            pgcopy.text(value)
        elif value is not None:
            pgcopy.json_text(value)
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def file_chunks(
    path: Path, source_format: str, mapping: dict[str, Any] | None = None
) -> Iterator[Iterator[Chunk]]:
    """The prepared chunks of ``path``: from a helper process for a large file, from this
    process otherwise. The parser's FileError comes out of the loop either way. Leaving
    the block early stops the helper."""
    if path.stat().st_size < HELPER_FROM_BYTES:
        parser = parser_for(source_format, mapping)
        yield prepared_chunks(
            parser(path),
            source_format,
            trajectories=CHUNK_TRAJECTORIES,
            steps=CHUNK_STEPS,
            size=CHUNK_BYTES,
        )
        return
    spec = {
        "path": str(path.resolve()),
        "format": source_format,
        "mapping": mapping,
        "trajectories": CHUNK_TRAJECTORIES,
        "steps": CHUNK_STEPS,
        "bytes": CHUNK_BYTES,
    }
    helper = subprocess.Popen(
        [sys.executable, "-m", "trajectories.prepare_process", json.dumps(spec)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert helper.stdout is not None
    with contextlib.suppress(OSError):
        fcntl.fcntl(helper.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    frames = _ReadAhead(helper.stdout, READ_AHEAD_BYTES)
    try:
        yield _received(helper, frames)
    finally:
        helper.kill()
        helper.wait()
        frames.stop()
        helper.stdout.close()


# What the pipe from the helper holds: Linux lets any process ask for up to 1 MiB.
PIPE_BYTES = 1 << 20
# How far the importer reads ahead of what it has written. The helper and PostgreSQL
# take about as long as each other, a chunk at a time, so with only the pipe between
# them each kept waiting on the other: reading ahead made a 1M-step import a fifth
# faster (bench/ingest.py).
READ_AHEAD_BYTES = 32 * 1024 * 1024


class _ReadAhead:
    """The helper's frames, read from its pipe by a thread of this process's own as
    soon as they come, up to ``limit`` bytes ahead of :meth:`next`. A frame is a
    length-prefixed pickle; None stands for the pipe ending in the middle of one."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        self._pipe = pipe
        self._limit = limit
        self._frames: collections.deque[bytes | None] = collections.deque()
        self._held = 0
        self._stopped = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, name="import-read-ahead", daemon=True)
        self._thread.start()

    def next(self) -> bytes | None:
        with self._changed:
            while not self._frames:
                self._changed.wait()
            frame = self._frames.popleft()
            self._held -= len(frame or b"")
            self._changed.notify_all()
        return frame

    def stop(self) -> None:
        """End the thread; the helper must have exited (its pipe then ends too)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        self._thread.join()

    def _read(self) -> None:
        try:
            self._read_frames()
        finally:
            # The pipe ended (after the helper's "end", or in the middle of a frame), or
            # reading it failed: what comes after the last whole frame is None.
            with self._changed:
                self._frames.append(None)
                self._changed.notify_all()

    def _read_frames(self) -> None:
        while True:
            head = self._pipe.read(8)
            size = int.from_bytes(head, "big")
            frame = self._pipe.read(size) if len(head) == 8 else b""
            if len(head) < 8 or len(frame) < size:
                return
            with self._changed:
                while self._held >= self._limit and not self._stopped:
                    self._changed.wait()
                if self._stopped:
                    return
                self._frames.append(frame)
                self._held += len(frame)
                self._changed.notify_all()


def _received(helper: subprocess.Popen[bytes], frames: _ReadAhead) -> Iterator[Chunk]:
    """The helper's messages, until its "end"."""
    while True:
        frame = frames.next()
        if frame is None:
            code = helper.wait()
            raise RuntimeError(
                f"the helper process preparing the import ended early (exit status {code})"
            )
        kind, value = pickle.loads(frame)
        if kind == "end":
            return
        if kind == "file_error":
            raise FileError(value)
        if kind == "crash":
            raise RuntimeError(f"the helper process preparing the import failed:\n{value}")
        yield value


def _send(out: IO[bytes], message: tuple[str, Any]) -> None:
    frame = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(len(frame).to_bytes(8, "big"))
    out.write(frame)


def _serve(spec: dict[str, Any], out: IO[bytes]) -> None:
    """The helper's side: parse, prepare, and pickle each chunk onto ``out``."""
    try:
        parser = parser_for(spec["format"], spec["mapping"])
        chunks = prepared_chunks(
            parser(Path(spec["path"])),
            spec["format"],
            trajectories=spec["trajectories"],
            steps=spec["steps"],
            size=spec["bytes"],
        )
        for chunk in chunks:
            _send(out, ("chunk", chunk))
        message: tuple[str, Any] = ("end", None)
    except FileError as error:
        message = ("file_error", str(error))
    except Exception:
        message = ("crash", traceback.format_exc())
    _send(out, message)
    out.flush()
