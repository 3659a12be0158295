"""Progress writers for export tests: the real ProgressWriter keeps its figure in a row
through its own connection; these answer without one."""

from __future__ import annotations

from trajectories.services.progress import ProgressWriter


class CancelledProgress(ProgressWriter):
    """A job whose user pressed Cancel: every report asks for the status, which says so."""

    def __init__(self) -> None:
        pass

    def report(self, amount: int) -> bool:
        return True

    def status(self) -> str | None:
        return "cancelled"
