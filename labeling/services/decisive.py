"""The decisive-failure label (the Who&When task): which agent, at which step, decided
that the trajectory failed, and why. It sits on the annotator's verdict
(``TrajectoryLabel.decisive_*``), one per annotator like the rest of it, and is set
apart from finishing: saving it leaves the verdict's status as it was (a new verdict
starts as a draft), and it counts as a label source once the trajectory is submitted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from labeling.models import TrajectoryLabel
from labeling.selectors import LabelingState
from labeling.services.common import (
    MAX_RATIONALE_CHARS,
    LabelingError,
    history_context,
    require_can_label,
)
from trajectories.agents import agent_name, step_agent
from trajectories.models import Step


@dataclass(frozen=True)
class AgentSteps:
    """A trajectory's agents (``trajectories.agents``) and the agent of each of its
    labelable steps, by index."""

    agents: list[str]
    by_step: dict[int, str]
    step_count: int
    # Whether any step names its agent (else the agents are the steps' roles).
    named: bool = False

    @property
    def multi_agent(self) -> bool:
        """Whether there is an agent to blame besides another: two agents, or agents named
        by the file (a single-agent math rollout has neither)."""
        return len(self.agents) > 1 or self.named


def agent_steps(trajectory_id: int) -> AgentSteps:
    """One query over the trajectory's steps."""
    return agent_steps_many([trajectory_id])[trajectory_id]


def agent_steps_many(trajectory_ids: Iterable[int]) -> dict[int, AgentSteps]:
    """Each trajectory's agents and steps, in one query over all their steps (a
    trajectory with no steps, or none such, has no agents and no steps)."""
    ids = sorted(set(trajectory_ids))
    rows: dict[int, list[tuple[int, str, str, bool]]] = {pk: [] for pk in ids}
    found = (
        Step.objects.filter(trajectory_id__in=ids)
        .order_by("trajectory_id", "index")
        .values_list("trajectory_id", "index", "agent", "role", "labelable")
    )
    for trajectory_id, index, agent, role, labelable in found.iterator(chunk_size=5000):
        rows[trajectory_id].append((index, agent, role, labelable))
    return {pk: _agent_steps(items) for pk, items in rows.items()}


def _agent_steps(rows: list[tuple[int, str, str, bool]]) -> AgentSteps:
    named = any(agent for _, agent, _, _ in rows)
    by_step = {}
    agents: dict[str, None] = {}
    for index, agent, role, labelable in rows:
        if not labelable or (named and not agent):
            continue
        name = step_agent(agent, role, named=named)
        if name:
            by_step[index] = name
            agents.setdefault(name, None)
    return AgentSteps(list(agents), by_step, len(rows), named)


def decisive_failure_set(
    *, state: LabelingState, agent: str = "", step: int | None = None, reason: str = ""
) -> TrajectoryLabel:
    """Set (or, with neither agent nor step, clear) this user's decisive failure on the
    trajectory. The step must be one of the trajectory's and the agent one of its
    agents; an agent left empty with a step given is that step's agent. Errors name
    the field (``step``, ``agent``)."""
    require_can_label(state)
    trajectory = state.trajectory
    known = agent_steps(trajectory.pk)
    agent = agent_name(agent) if agent.strip() else ""
    if step is not None:
        if not 0 <= step < known.step_count:
            raise LabelingError(
                f"Decisive step {step} is not in this trajectory (its steps are 0 to"
                f" {known.step_count - 1}).",
                field="step",
            )
        if not agent:
            agent = known.by_step.get(step, "")
    if agent and agent not in known.agents:
        listed = ", ".join(known.agents) or "none"
        raise LabelingError(
            f"Decisive agent {agent!r} is not one of this trajectory's agents ({listed}).",
            field="agent",
        )
    if not agent and step is None and reason.strip():
        raise LabelingError(
            "Decisive failure: name the agent or the step the reason is about.", field="agent"
        )
    with transaction.atomic(), history_context(action="decisive"):
        verdict, _ = TrajectoryLabel.objects.update_or_create(
            trajectory_id=trajectory.pk,
            annotator_id=state.user_id,
            defaults={
                "decisive_agent": agent,
                "decisive_step": step,
                "decisive_reason": reason.strip()[:MAX_RATIONALE_CHARS],
            },
        )
    return verdict
