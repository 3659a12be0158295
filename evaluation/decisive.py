"""Decisive failures compared: one decisive-failure source (``import:who-and-when``, a
human) against another (a model's failure attributions, ``model:<scorer>``, or a second
annotator), on the trajectories both judged. One query pulls the pairs; the numbers come
from :mod:`metrics.decisive`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection

from labeling.decisive_sources import decisive_source_parse, decisive_source_sql
from labeling.sources import LabelSource
from metrics.decisive import DecisiveAgreement, decisive_agreement
from trajectories.models import Project

# Pairs listed on the page (the metrics count them all).
PAIRS_SHOWN = 200
MAX_K = 50


@dataclass(frozen=True)
class DecisivePair:
    trajectory_id: int
    trajectory: str
    reference_agent: str
    reference_step: int | None
    candidate_agent: str
    candidate_step: int | None

    @property
    def agent_match(self) -> bool | None:
        if not self.reference_agent or not self.candidate_agent:
            return None
        return self.reference_agent == self.candidate_agent

    @property
    def step_distance(self) -> int | None:
        if self.reference_step is None or self.candidate_step is None:
            return None
        return abs(self.reference_step - self.candidate_step)


@dataclass(frozen=True)
class DecisiveComparison:
    reference: LabelSource
    candidate: LabelSource
    metrics: DecisiveAgreement
    pairs: list[DecisivePair]

    def as_json(self) -> dict[str, Any]:
        return {
            "reference": str(self.reference),
            "candidate": str(self.candidate),
            **self.metrics.as_json(),
        }


def decisive_compare(
    project: Project, *, reference: str, candidate: str, k: int = 1
) -> DecisiveComparison:
    """Agent and decisive-step accuracy of ``candidate`` against ``reference``; a
    ValueError names a source that is wrong or the same on both sides."""
    if not 0 <= k <= MAX_K:
        raise ValueError(f"k is {k}; expected 0 to {MAX_K}")
    ref = decisive_source_parse(reference)
    cand = decisive_source_parse(candidate)
    if str(ref) == str(cand):
        raise ValueError("the reference and the candidate are the same source")
    ref_sql, ref_params = decisive_source_sql(project, ref)
    cand_sql, cand_params = decisive_source_sql(project, cand)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT r.trajectory_id, t.external_id, r.agent, r.step, c.agent, c.step"
            f" FROM ({ref_sql}) r JOIN ({cand_sql}) c ON c.trajectory_id = r.trajectory_id"
            " JOIN trajectories_trajectory t ON t.id = r.trajectory_id"
            " ORDER BY r.trajectory_id",
            [*ref_params, *cand_params],
        )
        rows = cursor.fetchall()
    pairs = [
        DecisivePair(pk, external_id or f"#{pk}", ra or "", rs, ca or "", cs)
        for pk, external_id, ra, rs, ca, cs in rows
    ]
    metrics = decisive_agreement(
        [p.reference_agent for p in pairs],
        [p.candidate_agent for p in pairs],
        [p.reference_step for p in pairs],
        [p.candidate_step for p in pairs],
        k=k,
    )
    return DecisiveComparison(ref, cand, metrics, pairs)
