"""Judge modes: which requests a trajectory becomes, and which step values a verdict gives.

``per-step``: one request per scored step, showing the task, the steps before it and the
step (a PRM's view: a step never sees what follows it). Its verdict is the step's value.

``trajectory``: one request per trajectory, showing every step up to the last one to
score, asking for the first wrong step (ProcessBench's task, steps numbered from 0, -1 for
none). The steps before the named one get +1 (value 1), the named step -1 (value 0), and
the steps after it no score at all: once a step is wrong, the judge's silence about later
steps says nothing about them. -1 gives every shown step +1.

The failure-attribution modes (Who&When, Zhang et al. 2025) read a failed multi-agent
log (:class:`Log`, every step numbered by its index, each with its agent) and name the
decisive step; the step's agent is the responsible one. The candidates are the log's
labelable steps (inputs, such as the question or a code runner's output, decide nothing).
``all-at-once``: one request with the whole log naming agent and step (key ``t<id>``).
``step-by-step``: a request per candidate from the first, each asking whether that step
is the decisive error, until the first yes (keys ``t<id>:s<index>``). ``binary-search``:
a request per range of candidates, asking which half holds the decisive error, halving
until one step is left (keys ``t<id>:b<first index>-<last index>``). A multi-call mode's
next request is a function of the log and the replies stored so far
(:func:`attribution_next`), so a redelivered chunk resumes where its replies end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from scoring.judges.config import (
    ALL_AT_ONCE,
    BINARY_SEARCH,
    PER_STEP,
    STEP_BY_STEP,
    TRAJECTORY,
    JudgeParams,
)
from scoring.judges.replies import Verdict
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
    # Attribution modes: the log asked about.
    log: Log | None = None


@dataclass(frozen=True)
class LogStep:
    """One step of a multi-agent log: its id, index, agent (or speaker) and text;
    ``candidate``: labelable, so it can be the decisive step."""

    key: int
    index: int
    agent: str
    text: str
    candidate: bool = True


@dataclass(frozen=True)
class Log:
    key: int  # the trajectory's id
    task: str
    steps: tuple[LogStep, ...]

    @property
    def candidates(self) -> list[LogStep]:
        return [s for s in self.steps if s.candidate]

    @property
    def agents(self) -> list[str]:
        seen: dict[str, None] = {}
        for step in self.candidates:
            if step.agent:
                seen.setdefault(step.agent, None)
        return list(seen)


@dataclass(frozen=True)
class Attribution:
    """A mode's answer for one log: the decisive step's index (None: the judge found no
    decisive step), the agent it names ("": the step's), the critique, and the key of the
    reply that decided it."""

    trajectory: int
    step: int | None
    agent: str
    reason: str
    reply: str


@dataclass(frozen=True)
class Prompt:
    system: str
    template: str


def describe(request: JudgeRequest) -> str:
    """The request's steps, for error messages."""
    if request.step is not None:
        return f"step {request.step} of trajectory {request.trajectory}"
    if ":b" in request.key:
        span = request.key.split(":b", 1)[1].replace("-", " to ")
        return f"steps {span} of trajectory {request.trajectory}"
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


# --- Failure attribution ---------------------------------------------------------------------


def log_lines(log: Log, end: int | None = None) -> str:
    """The log's steps with index at most ``end`` (all where None), numbered by index."""
    lines = []
    for step in log.steps:
        if end is not None and step.index > end:
            break
        who = f" [{step.agent}]" if step.agent else ""
        lines.append(f"Step {step.index}{who}: {step.text}")
    return "\n\n".join(lines)


def _step_by_step_request(prompt: Prompt, log: Log, step: LogStep) -> JudgeRequest:
    values = {
        "task": log.task,
        "history": log_lines(log, step.index - 1) or "(none)",
        "step": step.text,
        "step_number": str(step.index),
        "agent": step.agent or "(unnamed)",
        "agents": ", ".join(log.agents),
    }
    return JudgeRequest(
        key=f"t{log.key}:s{step.index}",
        trajectory=log.key,
        step=step.key,
        messages=_messages(prompt, values),
        log=log,
    )


def _binary_request(prompt: Prompt, log: Log, first: int, last: int) -> JudgeRequest:
    """Candidates ``first`` to ``last`` (positions in the candidate list, first < last)."""
    candidates = log.candidates
    middle = (first + last) // 2
    lo, hi = candidates[first].index, candidates[last].index
    values = {
        "task": log.task,
        "log": log_lines(log, hi),
        "start": str(lo),
        "end": str(hi),
        "first_half": f"{lo} to {candidates[middle].index}",
        "second_half": f"{candidates[middle + 1].index} to {hi}",
        "agents": ", ".join(log.agents),
    }
    return JudgeRequest(
        key=f"t{log.key}:b{lo}-{hi}",
        trajectory=log.key,
        step=None,
        messages=_messages(prompt, values),
        log=log,
    )


def attribution_first(params: JudgeParams, prompt: Prompt, log: Log) -> list[JudgeRequest]:
    """Every request the mode could make for ``log`` that is at least as long as any
    other it could make: the one request (all at once), every candidate's (step by step),
    the first range's, which shows the most steps (binary search). For checking prompt
    lengths before anything is asked."""
    if params.mode == ALL_AT_ONCE:
        return [_all_at_once_request(prompt, log)]
    candidates = log.candidates
    if params.mode == STEP_BY_STEP:
        return [_step_by_step_request(prompt, log, step) for step in candidates]
    return [_binary_request(prompt, log, 0, len(candidates) - 1)] if len(candidates) > 1 else []


def _all_at_once_request(prompt: Prompt, log: Log) -> JudgeRequest:
    values = {
        "task": log.task,
        "log": log_lines(log),
        "step_count": str(len(log.steps)),
        "agents": ", ".join(log.agents),
    }
    return JudgeRequest(
        key=f"t{log.key}",
        trajectory=log.key,
        step=None,
        messages=_messages(prompt, values),
        log=log,
    )


def attribution_next(
    params: JudgeParams, prompt: Prompt, log: Log, answers: Mapping[str, Verdict]
) -> JudgeRequest | Attribution | None:
    """What ``log`` needs next given the replies stored so far (by key): the next request,
    the attribution once the replies decide it, or None when a reply the mode needed could
    not be read (a parse failure never becomes a verdict; the log gets none)."""
    candidates = log.candidates
    if not candidates:
        return Attribution(log.key, None, "", "the log has no step an agent took", "")
    if params.mode == ALL_AT_ONCE:
        request = _all_at_once_request(prompt, log)
        answer = answers.get(request.key)
        if answer is None:
            return request
        if not answer.parsed or answer.verdict is None or attribution_problem(request, answer):
            return None
        agent = log_agent(log, answer.agent) or ""
        return Attribution(log.key, answer.verdict, agent, answer.critique, request.key)
    if params.mode == STEP_BY_STEP:
        for step in candidates:
            request = _step_by_step_request(prompt, log, step)
            answer = answers.get(request.key)
            if answer is None:
                return request
            if not answer.parsed:
                return None
            if answer.verdict == 1:
                return Attribution(log.key, step.index, "", answer.critique, request.key)
        return Attribution(log.key, None, "", "no step was judged the decisive error", "")
    assert params.mode == BINARY_SEARCH
    first, last = 0, len(candidates) - 1
    reason, decided_by = "the log has one step an agent took", ""
    while first < last:
        request = _binary_request(prompt, log, first, last)
        answer = answers.get(request.key)
        if answer is None:
            return request
        if not answer.parsed:
            return None
        middle = (first + last) // 2
        first, last = (first, middle) if answer.verdict == 0 else (middle + 1, last)
        reason, decided_by = answer.critique, request.key
    return Attribution(log.key, candidates[first].index, "", reason, decided_by)


def attribution_problem(request: JudgeRequest, verdict: Verdict) -> str:
    """Why an all-at-once verdict cannot stand for its log ("" if it can): a step the log
    does not have, or an agent it does not have."""
    log = request.log
    if log is None or not verdict.parsed or request.key != f"t{log.key}" or verdict.verdict is None:
        return ""
    steps = {s.index: s for s in log.steps}
    if verdict.verdict not in steps:
        return f"verdict names step {verdict.verdict}; the log has steps 0 to {len(log.steps) - 1}"
    if verdict.agent and log_agent(log, verdict.agent) is None:
        return (
            f"verdict names agent {verdict.agent!r}; the log's agents are"
            f" {', '.join(log.agents) or 'none'}"
        )
    return ""


def log_agent(log: Log, name: str) -> str | None:
    """The log's agent ``name`` stands for (case and a trailing ``(...)`` ignored, as
    the agents are named), or None."""
    wanted = _QUALIFIER.sub("", name).strip().casefold()
    for agent in log.agents:
        if agent.casefold() == wanted:
            return agent
    return None


_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")
