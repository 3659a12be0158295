"""Following a folder a trainer keeps writing (``import_trajectories --follow DIR``): each
pass imports every file of the format that is new or grew since the last pass, once.

What a file has given is kept in its ``FollowedFile`` row, written in the transaction
that imports it: the bytes imported, their SHA-256, the lines among them and the file's
modification time. A JSON Lines file a trainer appends to (the formats in
:data:`APPENDABLE`) is imported a whole line at a time: a pass imports only the lines
after what was imported, once the bytes before them are still what was imported (their
hash says so), and leaves a last line still being written for the next pass. Those new
lines are imported from a copy that keeps their line numbers (blank lines stand for the
ones already imported, which every parser skips), so errors and line-based ids name the
file's own lines. Any other change (another format, a file rewritten or truncated) imports
the whole file again, which adds only the trajectories it did not have (the import skips
one whose content hash the project has). A file whose import failed is tried again once
it changes. So a restart, or two passes over an unchanged folder, imports nothing twice.
A pass holds an advisory lock on its source, so two never run at once on one folder.

A project admin may add a folder in the app (:func:`follow_source_add`, the followed
folders page); the worker then passes over it every few seconds (:func:`follow_sweep`,
from Celery beat). Such a folder must lie inside ``STEPSCOPE_FOLLOW_ROOTS`` once symbolic
links are resolved, checked when it is added and before each pass: the page cannot
make the server read anything else of its disk.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from stepscope.locks import LockClass, session_lock_try
from trajectories.formats import import_units
from trajectories.models import FollowedFile, FollowSource, Project
from trajectories.services.imports import ImportRejected, parser_get, trajectory_import

# Formats whose parser reads JSON Lines line by line, naming records by line: a file of
# theirs may be imported a part at a time.
APPENDABLE = frozenset({"stepscope", "verl", "nemo-gym", "rllm", "rllm-tokens"})
# Errors kept on a file's row, at most.
ERRORS_KEPT = 5


@dataclass
class FollowPass:
    """What one pass did: files looked at, imported (all or a new part), and failed."""

    files: int = 0
    imported: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    created: int = 0
    unchanged: int = 0
    rejected: int = 0
    steps: int = 0
    # Another pass held the folder: this one did nothing.
    skipped: bool = False


class FollowRefused(Exception):
    """A folder that cannot be followed, naming the field at fault."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


def follow_source_set(
    *, project: Project, path: Path, source_format: str, skip_invalid: bool = False
) -> FollowSource:
    """The project's source for the folder ``path`` and format (made on first use).
    Raises ValueError for an unknown format or a path that is not a folder."""
    parser_get(source_format)
    folder = path.resolve()
    if not folder.is_dir():
        raise ValueError(f"{path}: not a folder")
    source, _ = FollowSource.objects.get_or_create(
        project=project,
        path=str(folder),
        source_format=source_format,
        defaults={"skip_invalid": skip_invalid},
    )
    if source.skip_invalid != skip_invalid:
        source.skip_invalid = skip_invalid
        source.save(update_fields=["skip_invalid"])
    return source


def follow_source_add(
    *, project: Project, path: str, source_format: str, skip_invalid: bool = False
) -> FollowSource:
    """A folder for the worker to follow into ``project``. Refused (FollowRefused) for an
    unknown format, a path that is not absolute, outside ``STEPSCOPE_FOLLOW_ROOTS`` (its
    links resolved), not a folder, or followed already."""
    try:
        parser_get(source_format)
    except ValueError as error:
        raise FollowRefused("source_format", str(error)) from None
    if not Path(path).is_absolute():
        raise FollowRefused("path", f"{path!r} is not an absolute path")
    folder = Path(path).resolve()
    outside = _outside_roots(folder)
    if outside:
        raise FollowRefused("path", outside)
    if not folder.is_dir():
        raise FollowRefused("path", f"{folder} is not a folder")
    source, made = FollowSource.objects.get_or_create(
        project=project,
        path=str(folder),
        source_format=source_format,
        defaults={"skip_invalid": skip_invalid, "by_worker": True},
    )
    if not made:
        if source.by_worker:
            raise FollowRefused("path", f"{folder} is followed already as {source_format}")
        # Followed so far by `import_trajectories --follow`: the worker takes it over,
        # with what was imported from it.
        source.by_worker, source.skip_invalid = True, skip_invalid
        source.save(update_fields=["by_worker", "skip_invalid"])
    return source


def follow_source_remove(*, source: FollowSource) -> None:
    """Stop following the folder. What was imported from it stays; its files' progress
    goes, so following it again imports what the project does not have."""
    source.delete()


def _outside_roots(folder: Path) -> str:
    """Why ``folder`` (resolved) may not be followed from the app, or "" if it may."""
    roots: list[Path] = settings.STEPSCOPE_FOLLOW_ROOTS
    if any(folder == root or folder.is_relative_to(root) for root in roots):
        return ""
    allowed = ", ".join(str(root) for root in roots) or "none"
    return (
        f"{folder} is not inside a folder the server lets projects follow"
        f" (STEPSCOPE_FOLLOW_ROOTS: {allowed})"
    )


def follow_sweep() -> list[FollowPass]:
    """A pass over each folder followed in the app, of projects not being deleted (the
    worker's periodic task). A folder outside the roots now is not read; its source
    says why."""
    done = []
    sources = FollowSource.objects.filter(by_worker=True, project__deleting_since__isnull=True)
    for source in sources.select_related("project").order_by("pk"):
        outside = _outside_roots(Path(source.path).resolve())
        if outside:
            source.last_pass_at, source.last_error = timezone.now(), outside
            source.save(update_fields=["last_pass_at", "last_error"])
            continue
        done.append(follow_pass_run(source=source))
    return done


def follow_pass_run(*, source: FollowSource) -> FollowPass:
    """One pass over the source's folder, in sorted order: each file that is new or has
    changed since the last pass is imported (or its new lines are), each in its own
    transaction with its row. Skipped while another pass holds the folder."""
    with session_lock_try(LockClass.FOLLOW_SOURCE, source.pk) as taken:
        if not taken:
            return FollowPass(skipped=True)
        return _pass(source)


def _pass(source: FollowSource) -> FollowPass:
    result = FollowPass()
    folder = Path(source.path)
    known = {row.path: row for row in source.files.all()}
    try:
        units = import_units(source.source_format, folder) if folder.is_dir() else []
        error = "" if folder.is_dir() else f"{folder}: not a folder (any more)"
    except OSError as problem:
        units, error = [], f"{folder}: cannot be read: {problem}"
    for unit in units:
        result.files += 1
        relative = str(unit.relative_to(folder))
        row = known.get(relative) or FollowedFile(source=source, path=relative)
        try:
            size, mtime = _stat(unit)
        except OSError:
            continue  # removed between the listing and now
        if row.pk and (row.seen_size, row.seen_mtime) == (size, mtime):
            continue
        _file_pass(source, unit, row, size, mtime, result)
    source.last_pass_at = timezone.now()
    source.last_error = error
    source.save(update_fields=["last_pass_at", "last_error"])
    return result


def _file_pass(
    source: FollowSource,
    unit: Path,
    row: FollowedFile,
    size: int,
    mtime: float,
    result: FollowPass,
) -> None:
    appendable = source.source_format in APPENDABLE and unit.is_file() and unit.suffix == ".jsonl"
    with tempfile.TemporaryDirectory(prefix="stepscope-follow-") as scratch:
        if appendable:
            part = _new_lines(unit, row, Path(scratch))
            if part is None:  # nothing whole to add: only a line still being written
                row.seen_size, row.seen_mtime = size, mtime
                row.save()
                return
            path, imported_bytes, digest, lines = part
        else:
            path, imported_bytes, lines = unit, size, 0
            digest = _sha256(unit) if unit.is_file() else ""
        with transaction.atomic():
            try:
                batch = trajectory_import(
                    project=source.project,
                    source_format=source.source_format,
                    path=path,
                    skip_invalid=source.skip_invalid,
                )
            except ImportRejected as rejected:
                row.last_batch = rejected.batch
                row.error = "; ".join(
                    f"{problem['location']}"
                    + (f", field {problem['field']!r}" if problem["field"] else "")
                    + f": {problem['message']}"
                    for problem in rejected.batch.errors[:ERRORS_KEPT]
                )
                result.failed.append(row.path)
                result.rejected += rejected.batch.rejected_count
            else:
                row.last_batch = batch
                row.error = ""
                row.imported_bytes, row.imported_sha256 = imported_bytes, digest
                row.imported_lines, row.mtime = lines, mtime
                row.trajectories += batch.created_count
                result.imported.append(row.path)
                result.created += batch.created_count
                result.unchanged += batch.unchanged_count
                result.rejected += batch.rejected_count
                result.steps += batch.step_count
            row.seen_size, row.seen_mtime = size, mtime
            row.save()


def _new_lines(unit: Path, row: FollowedFile, scratch: Path) -> tuple[Path, int, str, int] | None:
    """A copy of ``unit`` holding only its whole lines after what ``row`` imported (blank
    lines in place of the rest), with the bytes, SHA-256 and lines it then has imported;
    None when no whole line is new. Where the imported bytes are not the file's start
    any more (rewritten, truncated), the copy holds every whole line."""
    with unit.open("rb") as handle:
        start, skipped = 0, 0
        if row.imported_bytes and _prefix_matches(handle, row):
            start, skipped = row.imported_bytes, row.imported_lines
        handle.seek(0)
        digest = hashlib.sha256()
        _copy(handle, start, digest, None)
        copy = scratch / unit.name
        with copy.open("wb") as out:
            out.write(b"\n" * skipped)
            added, end = _copy(handle, None, digest, out)
        if added == 0:
            return None
        # Only whole lines were copied; the digest is of the file up to the last of them.
        return copy, end, digest.hexdigest(), skipped + added


def _copy(
    handle: IO[bytes], limit: int | None, digest: hashlib._Hash, out: IO[bytes] | None
) -> tuple[int, int]:
    """Read ``handle`` on to byte ``limit`` (or to its last whole line), adding what is
    read to ``digest`` and writing it to ``out``; returns (lines, position reached)."""
    lines = 0
    if limit is not None:
        remaining = limit
        while remaining:
            chunk = handle.read(min(remaining, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            remaining -= len(chunk)
        return 0, handle.tell()
    position = handle.tell()
    for line in handle:
        if not line.endswith(b"\n"):
            break  # a line still being written: the next pass takes it whole
        digest.update(line)
        if out is not None:
            out.write(line)
        lines += 1
        position += len(line)
    return lines, position


def _prefix_matches(handle: IO[bytes], row: FollowedFile) -> bool:
    digest = hashlib.sha256()
    handle.seek(0)
    _copy(handle, row.imported_bytes, digest, None)
    return handle.tell() == row.imported_bytes and digest.hexdigest() == row.imported_sha256


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stat(unit: Path) -> tuple[int, float]:
    """Size and modification time of a file, or of a folder unit's files together."""
    if unit.is_dir():
        parts = [p.stat() for p in unit.rglob("*") if p.is_file()]
        return sum(p.st_size for p in parts), max((p.st_mtime for p in parts), default=0.0)
    stat = unit.stat()
    return stat.st_size, stat.st_mtime
