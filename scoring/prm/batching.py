"""Token sequences ready for a forward pass: windows with left truncation, and
length-sorted batches. Pure Python; the adapters turn a batch into tensors."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Read:
    """Where one step's score is read: token ``position`` of its sequence."""

    key: int
    position: int
    # Tokens cut from the left of this step's prefix so it fits the max length.
    dropped: int = 0

    def raw(self) -> dict[str, int | bool]:
        return {
            "tokens": self.position + 1,
            "truncated": self.dropped > 0,
            "dropped_tokens": self.dropped,
        }


@dataclass(frozen=True)
class Encoded:
    ids: tuple[int, ...]
    reads: tuple[Read, ...]
    token_type_ids: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self.ids)


def windows(ids: list[int], reads: list[Read], max_length: int) -> list[Encoded]:
    """Sequences that cover every read within ``max_length`` tokens.

    Reads whose whole prefix fits share one sequence, cut after the last of them. Each
    later read gets its own sequence: the ``max_length`` tokens ending at it, the left
    part dropped and recorded, so the step itself is always kept.
    """
    fitting = [r for r in reads if r.position < max_length]
    out: list[Encoded] = []
    if fitting:
        end = max(r.position for r in fitting) + 1
        out.append(Encoded(tuple(ids[:end]), tuple(fitting)))
    for read in reads:
        if read.position >= max_length:
            start = read.position + 1 - max_length
            out.append(
                Encoded(
                    tuple(ids[start : read.position + 1]),
                    (Read(read.key, max_length - 1, dropped=read.dropped + start),),
                )
            )
    return out


def left_truncated(
    ids: list[int], max_length: int, *, keep_first: int = 0
) -> tuple[list[int], int]:
    """``ids`` cut from the left to ``max_length``, keeping the first ``keep_first``
    tokens (a BOS or CLS). Returns the ids and how many were dropped."""
    if len(ids) <= max_length:
        return ids, 0
    dropped = len(ids) - max_length
    return ids[:keep_first] + ids[keep_first + dropped :], dropped


def batches(
    sequences: list[Encoded], *, batch_size: int, max_batch_tokens: int = 0
) -> Iterator[list[Encoded]]:
    """Longest first (so an out-of-memory shows up on the first batch), at most
    ``batch_size`` sequences and, if set, ``max_batch_tokens`` padded tokens each."""
    ordered = sorted(sequences, key=len, reverse=True)
    batch: list[Encoded] = []
    for sequence in ordered:
        width = len(batch[0]) if batch else len(sequence)
        too_many = len(batch) >= batch_size
        too_wide = max_batch_tokens and (len(batch) + 1) * width > max_batch_tokens
        if batch and (too_many or too_wide):
            yield batch
            batch = []
        batch.append(sequence)
    if batch:
        yield batch
