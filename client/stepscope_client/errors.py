"""The one exception the client raises for a refused request or a job that did not finish."""

from __future__ import annotations

from typing import Any


class StepscopeError(Exception):
    """A request Stepscope refused, or a job that failed or was cancelled.

    ``status`` is the HTTP status (``None`` for a job that ended badly); ``errors`` is the
    API's answer as it came, field by field: ``{"labels": {"3": {"value": "…"}}}``,
    ``{"project": ["…"]}``, or the job's own fields for a failed job."""

    def __init__(self, message: str, *, status: int | None = None, errors: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors: Any = errors if errors is not None else {}

    def __str__(self) -> str:
        head = super().__str__()
        return f"{head} (HTTP {self.status})" if self.status is not None else head
