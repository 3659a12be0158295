"""The trajectory page's reads: a long text in full, a live trace's state."""

from __future__ import annotations

import json

from django.conf import settings as django_settings
from django.utils import timezone

from trajectories.models import (
    LiveTrace,
    Trajectory,
)

# Steps longer than this show a preview on the trajectory page and load the rest on demand,
# so a page of long tool outputs stays small.
STEP_PREVIEW_CHARS = 2000

# The texts of a trajectory its page shows in part (a long one freezes the tab when laid
# out whole) and loads in full on demand.
TRAJECTORY_TEXT_FIELDS = ("task", "ground_truth", "metadata")


def trajectory_text_full(trajectory: Trajectory, field: str) -> str:
    """The whole text of one of ``TRAJECTORY_TEXT_FIELDS``; metadata as indented JSON."""
    if field == "metadata":
        if not trajectory.metadata:
            return ""
        return json.dumps(trajectory.metadata, indent=2, ensure_ascii=False, default=str)
    return str(getattr(trajectory, field) or "")


def live_trace_state(trajectory_id: int) -> str | None:
    """``"receiving"`` while a live trace may still grow (no root span yet, or a span
    within ``STEPSCOPE_OTLP_QUIET_SECONDS``), ``"finished"`` after, None for a trajectory
    that did not arrive live."""
    live = (
        LiveTrace.objects.filter(trajectory_id=trajectory_id)
        .only("root_seen", "last_span_at", "span_count", "assembled_count")
        .first()
    )
    if live is None:
        return None
    quiet = timezone.now() - live.last_span_at
    if (
        not live.root_seen
        or live.span_count > live.assembled_count
        or quiet.total_seconds() < django_settings.STEPSCOPE_OTLP_QUIET_SECONDS
    ):
        return "receiving"
    return "finished"
