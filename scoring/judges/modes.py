"""Judge modes: which requests a trajectory becomes, and which step values a verdict gives.

``per-step``: one request per scored step, showing the task, the steps before it and the
step (a PRM's view: a step never sees what follows it). Its verdict is the step's value.

``trajectory``: one request per trajectory, showing every step up to the last one to
score, asking for the first wrong step (ProcessBench's task, steps numbered from 0, -1 for
none). The steps before the named one get +1 (value 1), the named step -1 (value 0), and
the steps after it no score at all: once a step is wrong, the judge's silence about later
steps says nothing about them. -1 gives every shown step +1.
"""

from __future__ import annotations

from dataclasses import dataclass

from scoring.judges.config import PER_STEP, TRAJECTORY, JudgeParams
from scoring.judges.verdicts import Verdict
from scoring.prm.base import TrajectoryInput


@dataclass(frozen=True)
class JudgeRequest:
    """One call to the judge. ``key`` is unique in a run: ``s<step id>`` or
    ``t<trajectory id>``; ``step`` is the judged step (per-step) or None; ``scored``
    holds the shown steps' ids and whether each is to be scored (trajectory mode)."""

    key: str
    trajectory: int
    step: int | None
    messages: tuple[dict[str, str], ...]
    scored: tuple[tuple[int, bool], ...] = ()


@dataclass(frozen=True)
class Prompt:
    system: str
    template: str


def describe(request: JudgeRequest) -> str:
    """The request's steps, for error messages."""
    if request.step is not None:
        return f"step {request.step} of trajectory {request.trajectory}"
    return f"trajectory {request.trajectory}"


def numbered(trajectory: TrajectoryInput, end: int) -> str:
    lines = []
    for number, step in enumerate(trajectory.steps[:end]):
        role = f" [{step.role}]" if step.role and step.role != "assistant" else ""
        lines.append(f"Step {number}{role}: {step.text}")
    return "\n\n".join(lines)


def requests_build(
    params: JudgeParams, prompt: Prompt, trajectories: list[TrajectoryInput]
) -> list[JudgeRequest]:
    out: list[JudgeRequest] = []
    for trajectory in trajectories:
        if params.mode == TRAJECTORY:
            values = {
                "task": trajectory.task,
                "steps": numbered(trajectory, len(trajectory.steps)),
                "step_count": str(len(trajectory.steps)),
            }
            out.append(
                JudgeRequest(
                    key=f"t{trajectory.key}",
                    trajectory=trajectory.key,
                    step=None,
                    messages=_messages(prompt, values),
                    scored=tuple((s.key, s.score) for s in trajectory.steps),
                )
            )
            continue
        for index, step in enumerate(trajectory.steps):
            if not step.score:
                continue
            values = {
                "task": trajectory.task,
                "history": numbered(trajectory, index) or "(none)",
                "step": step.text,
                "step_number": str(index),
            }
            out.append(
                JudgeRequest(
                    key=f"s{step.key}",
                    trajectory=trajectory.key,
                    step=step.key,
                    messages=_messages(prompt, values),
                )
            )
    return out


def _messages(prompt: Prompt, values: dict[str, str]) -> tuple[dict[str, str], ...]:
    user = {"role": "user", "content": prompt.template.format(**values)}
    if not prompt.system:
        return (user,)
    return ({"role": "system", "content": prompt.system.format(**values)}, user)


def step_values(
    params: JudgeParams, request: JudgeRequest, verdict: Verdict
) -> tuple[dict[int, float], str]:
    """The step values (0..1) a parsed verdict gives, or ``({}, error)`` when a
    trajectory verdict names a step that is not shown."""
    if not verdict.parsed or verdict.verdict is None:
        return {}, verdict.error
    if params.mode == PER_STEP:
        assert request.step is not None and verdict.value is not None
        return {request.step: verdict.value}, ""
    first_wrong = verdict.verdict
    if first_wrong < -1 or first_wrong >= len(request.scored):
        return {}, (
            f"verdict names step {first_wrong}; the judge was shown steps 0 to"
            f" {len(request.scored) - 1} (or -1 for none wrong)"
        )
    values: dict[int, float] = {}
    for number, (step, score) in enumerate(request.scored):
        if first_wrong != -1 and number > first_wrong:
            break
        if score:
            values[step] = 0.0 if number == first_wrong else 1.0
    return values, ""
