"""``ago``, the builtin filter pages use for the age of a count, a job or a token's use."""

from __future__ import annotations

from datetime import timedelta

from django.template import engines
from django.utils import timezone


def rendered(moment: object) -> str:
    return engines["django"].from_string("Counted {{ moment|ago }}.").render({"moment": moment})


def test_under_a_minute_is_just_now_not_zero_minutes() -> None:
    assert rendered(timezone.now() - timedelta(seconds=20)) == "Counted just now."


def test_older_says_how_long_ago() -> None:
    # timesince's own words, its non-breaking spaces kept ("5\xa0minutes").
    five = rendered(timezone.now() - timedelta(minutes=5, seconds=10))
    assert five == "Counted 5\xa0minutes ago."
    two = rendered(timezone.now() - timedelta(hours=2, minutes=3))
    assert two == "Counted 2\xa0hours, 3\xa0minutes ago."


def test_no_moment_says_nothing() -> None:
    assert rendered(None) == "Counted ."
