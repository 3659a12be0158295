"""Background jobs as the API reports them (imports, exports, scoring and attribution runs,
roll-outs), and a progress bar for ``Client.wait``."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

ACTIVE = ("queued", "running")


@dataclass
class Job:
    """One job: ``kind`` is its collection in the API (``imports``, ``exports``,
    ``scoring-runs``, ``attribution-runs``, ``rollouts``, ``project-deletions``), ``data``
    its latest answer."""

    kind: str
    data: dict[str, Any] = field(repr=False)

    @property
    def id(self) -> int:
        return int(self.data["id"])

    @property
    def status(self) -> str:
        return str(self.data.get("status", ""))

    @property
    def finished(self) -> bool:
        return self.status not in ACTIVE

    @property
    def progress(self) -> tuple[int, int | None]:
        """Units done and the total where the job knows it (an import counts trajectories
        and learns the total only at the end)."""
        if "removed_steps" in self.data:  # a project deletion
            total = self.data.get("total_steps")
            return int(self.data["removed_steps"] or 0), int(total) if total else None
        if "done" in self.data:
            total = self.data.get("total")
            return int(self.data["done"] or 0), int(total) if total else None
        return int(self.data.get("processed_count") or 0), None

    def __repr__(self) -> str:
        return f"Job({self.kind}/{self.id}, {self.status})"


class ProgressBar:
    """A one-line bar on a stream (stderr by default), redrawn on each poll."""

    def __init__(self, stream: TextIO | None = None, width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.width = width

    def __call__(self, job: Job) -> None:
        done, total = job.progress
        if total:
            filled = min(self.width, self.width * done // total)
            bar = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        else:
            bar = f"{done} done"
        end = "\n" if job.finished else ""
        self.stream.write(f"\r{job.kind} {job.id}: {job.status:<9} {bar}{end}")
        self.stream.flush()
