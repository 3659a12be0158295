"""Who the agents of a trajectory are, for its decisive-failure label (the Who&When
task: which agent and which step decided that the run failed).

A step's speaker is its ``agent`` (AutoGen / AG2 group chats name every agent's turn);
in a trajectory where no step names an agent, its ``role`` (Magentic-One logs put the
speaker there). A trailing qualifier in parentheses is dropped, so
``Orchestrator (thought)`` and ``Orchestrator (-> WebSurfer)`` are both the agent
``Orchestrator``, as Who&When's ``mistake_agent`` calls it. Only labelable steps count:
inputs (the person asking, a code runner's output) decide nothing. The importer checks a
label against these names, the page offers them, and the compare pages match on them.
"""

# Django-free: the mapped importer (trajectories/formats) uses it too.
from __future__ import annotations

import re
from collections.abc import Iterable

QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")


def agent_name(speaker: str) -> str:
    """``speaker`` without a trailing ``(...)`` qualifier, trimmed."""
    name = QUALIFIER.sub("", speaker).strip()
    return name or speaker.strip()


def step_agent(agent: str, role: str, *, named: bool) -> str:
    """The agent a step belongs to: its agent's name in a trajectory whose steps are
    ``named``, else its role's."""
    return agent_name(agent) if named else agent_name(role)


def trajectory_agents(steps: Iterable[tuple[str, str, bool]]) -> list[str]:
    """The agents of a trajectory from its steps' ``(agent, role, labelable)``, in the
    order they first act."""
    rows = list(steps)
    named = any(agent for agent, _, _ in rows)
    seen: dict[str, None] = {}
    for agent, role, labelable in rows:
        if not labelable or (named and not agent):
            continue
        name = step_agent(agent, role, named=named)
        if name:
            seen.setdefault(name, None)
    return list(seen)
