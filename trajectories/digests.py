"""The content digests an import has written, held in fixed memory (no Django): the
import writer asks it which digests might already be in a new project."""

# Django-free: plain bytes arithmetic, tested on its own.
from __future__ import annotations


class DigestFilter:
    """The content digests an import has written, in fixed memory: a Bloom filter. It
    never answers no for a digest it holds; a wrong yes costs one probe of the database.
    With three bits of 2**25 per digest, such a yes comes for one new digest in 1,600
    once a million are in, and for one in five once ten million are."""

    BITS = 1 << 25  # 4 MiB

    def __init__(self) -> None:
        self._bits = bytearray(self.BITS // 8)

    def add(self, digest: str) -> None:
        bits = self._bits
        for bit in self._positions(digest):
            bits[bit >> 3] |= 1 << (bit & 7)

    def __contains__(self, digest: str) -> bool:
        bits = self._bits
        first, second, third = self._positions(digest)
        return bool(
            bits[first >> 3] & (1 << (first & 7))
            and bits[second >> 3] & (1 << (second & 7))
            and bits[third >> 3] & (1 << (third & 7))
        )

    def _positions(self, digest: str) -> tuple[int, int, int]:
        # A digest is sha256 hex, as good as random: the low 25 bits of three separate
        # 28-bit stretches of its first 84 bits are three independent positions.
        value, mask = int(digest[:21], 16), self.BITS - 1
        return value & mask, (value >> 28) & mask, (value >> 56) & mask
