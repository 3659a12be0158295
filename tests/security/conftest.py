"""What the security tests share beyond their world (world.py)."""

from __future__ import annotations

import pytest

from stepscope import health


@pytest.fixture(autouse=True)
def _readyz_waits_briefly_for_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """/readyz asks the Celery workers which queues they serve and waits a second for
    their replies. The route walks request it some thirty times, and no reply changes
    what they check (a status, what a page shows), so a short wait answers the same and
    spares half a minute. tests/deployment checks the workers' replies."""
    monkeypatch.setattr(health, "INSPECT_TIMEOUT", 0.05)
