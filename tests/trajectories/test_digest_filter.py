"""The import's filter of digests written: never a false no, rarely a false yes."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from trajectories.digests import DigestFilter


def digest(number: int) -> str:
    return hashlib.sha256(str(number).encode()).hexdigest()


@settings(max_examples=50)
@given(st.lists(st.integers(), max_size=200))
def test_every_digest_added_is_held(numbers: list[int]) -> None:
    written = DigestFilter()
    for number in numbers:
        written.add(digest(number))
    assert all(digest(number) in written for number in numbers)


def test_digests_not_added_are_rarely_held() -> None:
    written = DigestFilter()
    for number in range(100_000):
        written.add(digest(number))
    others = [digest(number) for number in range(100_000, 200_000)]
    # At this fill the expected rate of a false yes is about 1 in 1.4 million.
    assert sum(other in written for other in others) <= 2
