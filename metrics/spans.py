"""Agreement between annotators' span labels, by overlap (no Django).

A span is a value on a run of consecutive steps of one trajectory. Two measures:

- **Per-value IoU** (intersection over union): for one value, the steps annotator A
  covered with it and the steps B covered with it, over every trajectory both were
  asked about; |A and B| / |A or B|. 1.0 when they bracketed exactly the same steps, 0.0
  when their spans of that value never touch. A value neither annotator used has no IoU
  (None), not a perfect one. Spans of one annotator that overlap count each step once.
- **Per-step agreement**: each step carries the set of values whose spans cover it (the
  per-step view an export writes); the share of steps, among those that either
  annotator covered with anything, where both give the same set. None when neither
  covered a step.

With more than two annotators each figure is the mean over the pairs that have one.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations


@dataclass(frozen=True, slots=True)
class Span:
    """A value on steps ``start`` to ``end`` (both included) of trajectory ``trajectory``."""

    trajectory: Hashable
    start: int
    end: int
    value: str

    def steps(self) -> range:
        return range(self.start, self.end + 1)


def step_values(spans: Iterable[Span]) -> dict[tuple[Hashable, int], frozenset[str]]:
    """The values covering each covered step, by (trajectory, step index)."""
    covered: dict[tuple[Hashable, int], set[str]] = {}
    for span in spans:
        for index in span.steps():
            covered.setdefault((span.trajectory, index), set()).add(span.value)
    return {key: frozenset(values) for key, values in covered.items()}


def per_step_values(spans: Iterable[Span], step_count: int) -> list[list[str]]:
    """One trajectory's spans as a value list per step (sorted; empty where no span
    covers the step), for steps 0 to ``step_count - 1``."""
    rows: list[set[str]] = [set() for _ in range(step_count)]
    for span in spans:
        for index in span.steps():
            if 0 <= index < step_count:
                rows[index].add(span.value)
    return [sorted(values) for values in rows]


def value_iou(a: Iterable[Span], b: Iterable[Span], value: str) -> float | None:
    """IoU of the steps ``a`` and ``b`` cover with ``value``; None when neither does."""
    steps_a = {(s.trajectory, i) for s in a if s.value == value for i in s.steps()}
    steps_b = {(s.trajectory, i) for s in b if s.value == value for i in s.steps()}
    union = steps_a | steps_b
    if not union:
        return None
    return len(steps_a & steps_b) / len(union)


def step_agreement(a: Iterable[Span], b: Iterable[Span]) -> float | None:
    """Share of the steps either covers where both give the same set of values."""
    values_a = step_values(a)
    values_b = step_values(b)
    covered = values_a.keys() | values_b.keys()
    if not covered:
        return None
    same = sum(1 for key in covered if values_a.get(key) == values_b.get(key))
    return same / len(covered)


@dataclass(frozen=True)
class SpanAgreement:
    """Pairwise-mean agreement of several annotators' spans."""

    annotators: list[str]
    pairs: int
    # value -> mean IoU over the pairs where either used the value (None: no pair did).
    iou: dict[str, float | None] = field(default_factory=dict)
    step_agreement: float | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "annotators": self.annotators,
            "pairs": self.pairs,
            "iou": self.iou,
            "step_agreement": self.step_agreement,
        }


def _mean(figures: Sequence[float | None]) -> float | None:
    known = [f for f in figures if f is not None]
    return sum(known) / len(known) if known else None


def span_agreement(
    by_annotator: dict[str, list[Span]], values: Sequence[str] = ()
) -> SpanAgreement:
    """Per-value IoU and per-step agreement between every pair of annotators. ``values``
    lists the values to report (a schema's, in its order); values found in the spans
    but not listed are reported after them."""
    names = sorted(by_annotator)
    found = [v for v in dict.fromkeys(s.value for spans in by_annotator.values() for s in spans)]
    reported = list(dict.fromkeys([*values, *sorted(found)]))
    pairs = list(combinations(names, 2))
    iou = {
        value: _mean([value_iou(by_annotator[a], by_annotator[b], value) for a, b in pairs])
        for value in reported
    }
    steps = _mean([step_agreement(by_annotator[a], by_annotator[b]) for a, b in pairs])
    return SpanAgreement(annotators=names, pairs=len(pairs), iou=iou, step_agreement=steps)
