"""Writing a model's failure attributions (``FailureVerdict``, the ``model:<scorer>``
decisive-failure source): what an LLM-judge failure-attribution run stores, one verdict
per trajectory. Every verdict is checked against its trajectory as a human's is (the
step one of its steps, the agent one of its agents) before any is written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from labeling.services import agent_steps_many
from scoring.models import FailureVerdict, Scorer
from scoring.services.runners import ScoringError
from trajectories.agents import agent_name
from trajectories.models import Trajectory


@dataclass(frozen=True)
class VerdictInput:
    """One model verdict: ``agent`` "" with a step means that step's agent."""

    trajectory_id: int
    agent: str = ""
    step: int | None = None
    reason: str = ""
    confidence: float | None = None


def failure_verdicts_write(*, scorer: Scorer, verdicts: Sequence[VerdictInput]) -> int:
    """Write (or replace) ``scorer``'s verdicts, all or nothing; a ScoringError names the
    verdict (its position and trajectory) and the field. Trajectories must be in the
    scorer's project (any project for a global scorer). Returns how many were written.

    A constant number of queries whatever the count: the trajectories' projects, their
    steps' agents, and one ``INSERT ... ON CONFLICT (trajectory, scorer) DO UPDATE`` per
    2000 verdicts. A trajectory given twice keeps its last verdict."""
    ids = {v.trajectory_id for v in verdicts}
    projects = dict(Trajectory.objects.filter(pk__in=ids).values_list("pk", "project_id"))
    steps_of = agent_steps_many(projects)
    rows: dict[int, FailureVerdict] = {}
    for number, verdict in enumerate(verdicts):
        where = f"verdict {number} (trajectory {verdict.trajectory_id})"
        project_id = projects.get(verdict.trajectory_id)
        if project_id is None or (scorer.project_id and project_id != scorer.project_id):
            raise ScoringError(f"{where}, field 'trajectory': no such trajectory here")
        known = steps_of[verdict.trajectory_id]
        step, agent = verdict.step, agent_name(verdict.agent) if verdict.agent.strip() else ""
        if step is not None and not 0 <= step < known.step_count:
            raise ScoringError(
                f"{where}, field 'step': {step} is not one of its steps"
                f" (0 to {known.step_count - 1})"
            )
        if step is not None and not agent:
            agent = known.by_step.get(step, "")
        if agent and agent not in known.agents:
            raise ScoringError(
                f"{where}, field 'agent': {agent!r} is not one of its agents"
                f" ({', '.join(known.agents) or 'none'})"
            )
        rows[verdict.trajectory_id] = FailureVerdict(
            trajectory_id=verdict.trajectory_id,
            scorer=scorer,
            agent=agent,
            step=step,
            reason=verdict.reason,
            confidence=verdict.confidence,
        )
    with transaction.atomic():
        FailureVerdict.objects.bulk_create(
            list(rows.values()),
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["trajectory", "scorer"],
            update_fields=["agent", "step", "reason", "confidence"],
        )
    return len(rows)
