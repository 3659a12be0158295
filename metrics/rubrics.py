"""Agreement between two sources' rubric marks (a judge against people, one annotator
against another), per criterion, over the trajectories both marked on that criterion:

- ``agreement``: the share of those trajectories given the same mark;
- ``kappa``: Cohen's kappa over the three marks (met, not met, n/a); None where chance
  agreement is perfect (both always gave one and the same mark) or nothing is paired;
- ``confusion``: counts of (a's mark, b's mark), rows ``a``, columns ``b``, in ``MARKS``
  order;
- ``evidence_jaccard``: the mean Jaccard overlap of the two evidence step sets, over the
  pairs where at least one side cites a step (``evidence_pairs`` of them); None where
  there are none. Pairs where neither cites a step say nothing about evidence.

Plain data in, plain data out: marks by trajectory, by criterion, ``(mark, evidence)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from metrics.agreement import kappa_from_confusion

MARKS = ("met", "not_met", "na")

# trajectory -> criterion -> (mark, evidence step indexes)
RubricMarks = Mapping[int, Mapping[int, tuple[str, Iterable[int]]]]


def jaccard(a: Iterable[int], b: Iterable[int]) -> float | None:
    """The size of the intersection over the size of the union; None when both are empty."""
    left, right = set(a), set(b)
    union = left | right
    return len(left & right) / len(union) if union else None


@dataclass(frozen=True)
class CriterionAlignment:
    criterion: int
    pairs: int
    agreement: float | None
    kappa: float | None
    confusion: tuple[tuple[int, ...], ...]
    evidence_pairs: int
    evidence_jaccard: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion,
            "pairs": self.pairs,
            "agreement": self.agreement,
            "kappa": self.kappa,
            "confusion": {"marks": list(MARKS), "counts": [list(row) for row in self.confusion]},
            "evidence_pairs": self.evidence_pairs,
            "evidence_jaccard": self.evidence_jaccard,
        }


def criterion_alignment(
    criterion: int, pairs: Iterable[tuple[tuple[str, Iterable[int]], tuple[str, Iterable[int]]]]
) -> CriterionAlignment:
    """One criterion's figures from ``((a mark, a evidence), (b mark, b evidence))`` pairs."""
    counts = [[0] * len(MARKS) for _ in MARKS]
    overlaps: list[float] = []
    total = 0
    for (mark_a, evidence_a), (mark_b, evidence_b) in pairs:
        if mark_a not in MARKS or mark_b not in MARKS:
            raise ValueError(f"criterion {criterion}: marks are {', '.join(MARKS)}")
        counts[MARKS.index(mark_a)][MARKS.index(mark_b)] += 1
        total += 1
        overlap = jaccard(evidence_a, evidence_b)
        if overlap is not None:
            overlaps.append(overlap)
    same = sum(counts[i][i] for i in range(len(MARKS)))
    kappa = kappa_from_confusion(counts) if total else math.nan
    return CriterionAlignment(
        criterion=criterion,
        pairs=total,
        agreement=same / total if total else None,
        kappa=kappa if math.isfinite(kappa) else None,
        confusion=tuple(tuple(row) for row in counts),
        evidence_pairs=len(overlaps),
        evidence_jaccard=sum(overlaps) / len(overlaps) if overlaps else None,
    )


def rubric_alignment(a: RubricMarks, b: RubricMarks, criteria: int) -> list[CriterionAlignment]:
    """Each criterion's figures (``0`` to ``criteria - 1``), over the trajectories where
    both ``a`` and ``b`` marked it."""
    out = []
    for criterion in range(criteria):
        pairs = [
            (a[trajectory][criterion], b[trajectory][criterion])
            for trajectory in sorted(set(a) & set(b))
            if criterion in a[trajectory] and criterion in b[trajectory]
        ]
        out.append(criterion_alignment(criterion, pairs))
    return out
