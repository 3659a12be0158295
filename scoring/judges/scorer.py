"""A judge as a step scorer, for the reward worker: the trajectories' judge requests
(``modes.requests_build``) asked through the judge's backend, each reply read
(``replies.verdict_read``) and turned into step values (``modes.step_values``), as a judge
run's chunk does, with nothing stored.

A step whose reply has no readable verdict, or whose prompt passes the judge's context,
gets no value (the caller sees ``null``), never a made-up one. What no retry mends (an
endpoint that cannot be reached, refuses the key or keeps failing) is raised as the
backend's :class:`JudgeError`; past ``deadline`` the asking stops (:class:`PastDeadline`):
nobody waits for the answer any more.
"""

# Django-free: the reward worker's judge path, on plain data.
from __future__ import annotations

import dataclasses
import time

from scoring.judges.backend import JudgeSpec, Reply, TooLong, judge_load
from scoring.judges.config import JudgeError
from scoring.judges.modes import JudgeRequest, Prompt, requests_build, step_values
from scoring.judges.replies import verdict_read
from scoring.prm.base import StepResult, TrajectoryInput


class PastDeadline(JudgeError):
    """The callers' deadline passed while the judge was still being asked."""


class JudgeStepScorer:
    def __init__(self, spec: JudgeSpec, prompt: Prompt, *, deadline: float | None = None) -> None:
        if not spec.params.values_steps:
            raise JudgeError(
                f"a judge in mode {spec.params.mode!r} gives no value per step (it names a"
                " failing step or fills a rubric)"
            )
        self.deadline = deadline
        params = spec.params
        if deadline is not None and params.backend == "remote":
            # One call, or one wait between retries, never outlasts the callers' wait. (A
            # local judge's parameters stay as they are: they key its loaded model.)
            left = max(0.1, deadline - time.time())
            params = dataclasses.replace(
                params,
                timeout_seconds=min(params.timeout_seconds, left),
                retry_max_seconds=min(params.retry_max_seconds, left),
            )
        self.spec = dataclasses.replace(spec, params=params)
        self.prompt = prompt
        self.calls = 0

    def score(self, trajectories: list[TrajectoryInput]) -> list[StepResult]:
        params = self.spec.params
        requests = requests_build(params, self.prompt, trajectories)
        values: dict[int, float] = {}
        verdicts: dict[int, int | None] = {}

        def on_reply(request: JudgeRequest, reply: Reply) -> None:
            self.calls += 1
            if self.deadline is not None and time.time() > self.deadline:
                raise PastDeadline("the callers' deadline passed while the judge was asked")
            verdict = verdict_read(params, reply.text, list(reply.tokens or ()) or None)
            found, _ = step_values(params, request, verdict)
            for step, value in found.items():
                values[step] = value
                verdicts[step] = verdict.verdict

        def on_too_long(too_long: TooLong) -> None:
            self.calls += 1  # its steps keep no value

        try:
            judge_load(self.spec).judge(requests, on_reply, on_too_long)
        except JudgeError as error:
            if self.deadline is not None and time.time() > self.deadline:
                # A call cut short by the deadline (its timeout is the time that was
                # left) is not the endpoint's fault.
                raise PastDeadline(str(error)) from error
            raise
        return [
            StepResult(step, value, {"verdict": verdicts[step]}) for step, value in values.items()
        ]
