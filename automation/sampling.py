"""Which trajectories a rule's sampling rate keeps.

The choice is a hash of (rule, trajectory), not a random draw, so a task that runs again
(a redelivery, a backfill after an arrival) decides the same way for the same pair, and
two rules with one rate keep different trajectories."""

# Django-free: a pure function of the rule's and the trajectory's ids.
from __future__ import annotations

import hashlib

# The hash's first eight bytes read as a number in [0, 1).
_SCALE = float(1 << 64)


def sample_point(rule_id: int, trajectory_id: int) -> float:
    """Where the pair falls in [0, 1): the rule keeps the trajectory when it is below
    the rate."""
    digest = hashlib.sha256(f"stepscope-rule:{rule_id}:{trajectory_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def sample_keeps(rule_id: int, trajectory_id: int, rate: float) -> bool:
    """Whether a rule with sampling ``rate`` (0..1; 1 keeps all) acts on the trajectory."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    return sample_point(rule_id, trajectory_id) < rate
