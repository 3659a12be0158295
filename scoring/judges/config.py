"""A judge's parameters and its prompt templates, validated without loading a model.

A template is Python ``str.format`` text over a fixed set of placeholders per mode (literal
braces doubled, as in ``\\boxed{{+1}}``); anything else is refused when the prompt version
is created, not when a worker first renders it.
"""

from __future__ import annotations

import dataclasses
import re
import string
from dataclasses import dataclass, field
from typing import Any

from scoring.prm.params import params_build

PER_STEP = "per-step"
TRAJECTORY = "trajectory"
# Who&When's failure-attribution methods (Zhang et al. 2025): the judge names the agent
# and the decisive step of a failed multi-agent log; the run writes FailureVerdicts.
ALL_AT_ONCE = "all-at-once"
STEP_BY_STEP = "step-by-step"
BINARY_SEARCH = "binary-search"
ATTRIBUTION_MODES = (ALL_AT_ONCE, STEP_BY_STEP, BINARY_SEARCH)
# The judge fills a project's rubric per trajectory (``scoring.judges.rubric``): each
# criterion met, not met or not applicable, with its evidence steps; the run writes
# JudgeRubricMarks, not step scores.
RUBRIC = "rubric"
MODES = (PER_STEP, TRAJECTORY, *ATTRIBUTION_MODES, RUBRIC)
BACKENDS = ("local", "remote")

# What each mode's template may name. Steps are numbered from 0, as ProcessBench numbers
# its paragraphs, so a trajectory-mode verdict is the index of the first wrong step.
PLACEHOLDERS: dict[str, dict[str, str]] = {
    PER_STEP: {
        "task": "the trajectory's task",
        "history": "the steps before the judged one, numbered (or '(none)')",
        "step": "the judged step's text",
        "step_number": "the judged step's number (from 0)",
    },
    TRAJECTORY: {
        "task": "the trajectory's task",
        "steps": "every step shown, numbered from 0",
        "step_count": "how many steps are shown",
    },
    # The log's steps are numbered by their index in the trajectory, each with its agent.
    ALL_AT_ONCE: {
        "task": "the trajectory's task",
        "log": "every step of the log, numbered from 0, each with its agent",
        "step_count": "how many steps the log has",
        "agents": "the log's agents, comma-separated",
    },
    STEP_BY_STEP: {
        "task": "the trajectory's task",
        "history": "the log's steps before the judged one, numbered (or '(none)')",
        "step": "the judged step's text",
        "step_number": "the judged step's number in the log",
        "agent": "the judged step's agent",
        "agents": "the log's agents, comma-separated",
    },
    BINARY_SEARCH: {
        "task": "the trajectory's task",
        "log": "the log's steps up to the end of the range, numbered",
        "start": "the first step of the range searched",
        "end": "the last step of the range searched",
        "first_half": "the first half of the range, 'A to B'",
        "second_half": "the second half of the range, 'C to D'",
        "agents": "the log's agents, comma-separated",
    },
    RUBRIC: {
        "task": "the trajectory's task",
        "steps": "every step, numbered by its index from 0",
        "step_count": "how many steps the trajectory has",
        "criteria": "the rubric's criteria, numbered from 0, each with its weight and condition",
        "criterion_count": "how many criteria the rubric has",
    },
}

DEFAULT_SYSTEM = "You are a careful, strict verifier of step-by-step work."
DEFAULT_TEMPLATES = {
    PER_STEP: (
        "Task:\n{task}\n\nEarlier steps:\n{history}\n\n"
        "Step to check (step {step_number}):\n{step}\n\n"
        "Is this step correct? Explain briefly, then end with \\boxed{{+1}} if the step is"
        " correct, \\boxed{{0}} if it cannot be judged, or \\boxed{{-1}} if it is wrong."
    ),
    TRAJECTORY: (
        "Task:\n{task}\n\nSolution, {step_count} steps numbered from 0:\n{steps}\n\n"
        "Review the steps in order and find the earliest step that contains an error."
        " Explain briefly, then end with \\boxed{{N}}, N the number of that step, or"
        " \\boxed{{-1}} if every step is correct."
    ),
    ALL_AT_ONCE: (
        "A team of agents worked on this task and failed.\n\nTask:\n{task}\n\n"
        "The log, {step_count} steps numbered from 0, each with the agent that took it:\n"
        "{log}\n\nWhich agent made the decisive error, and at which step? The decisive"
        " error is the earliest step that, had it been right, would have led the team to"
        " succeed. The agents: {agents}. Explain briefly, then end with two lines:\n"
        "Agent: <the agent's name>\nStep: <the step's number>"
    ),
    STEP_BY_STEP: (
        "A team of agents worked on this task and failed.\n\nTask:\n{task}\n\n"
        "The log so far:\n{history}\n\nStep to judge (step {step_number}, by {agent}):\n"
        "{step}\n\nIs this step the decisive error: the earliest step that, had it been"
        " right, would have led the team to succeed? Explain briefly, then end with the"
        " line:\nDecisive: yes\nor\nDecisive: no"
    ),
    BINARY_SEARCH: (
        "A team of agents worked on this task and failed.\n\nTask:\n{task}\n\n"
        "The log up to step {end}:\n{log}\n\nThe decisive error (the earliest step that,"
        " had it been right, would have led the team to succeed) is one of steps {start}"
        " to {end}. Is it in the first half, steps {first_half}, or in the second half,"
        " steps {second_half}? Explain briefly, then end with the line:\n"
        "Half: first\nor\nHalf: second"
    ),
    RUBRIC: (
        "Task:\n{task}\n\nThe trajectory, {step_count} steps numbered from 0:\n{steps}\n\n"
        "The rubric, {criterion_count} criteria numbered from 0:\n{criteria}\n\n"
        'For each criterion decide whether the trajectory meets it ("met"), does not'
        ' ("not_met"), or the criterion does not apply ("na"), and list the numbers of'
        " the steps that are its evidence. Explain briefly, then end with one JSON object"
        " naming every criterion once, and nothing after it:\n"
        '{{"criteria": [{{"criterion": 0, "mark": "met", "evidence": [2, 5]}}]}}'
    ),
}
# The last match in a reply is the verdict (judges reason first, answer last).
DEFAULT_PATTERNS = {
    PER_STEP: r"\\boxed\{\s*([+-]?[01])\s*\}",
    TRAJECTORY: r"\\boxed\{\s*(-?\d+)\s*\}",
}
DEFAULT_VALUES = {"+1": 1, "1": 1, "+0": 0, "0": 0, "-0": 0, "-1": -1}


class JudgeError(Exception):
    """A judge cannot run as configured or asked: bad parameters or template, an endpoint
    that refuses (unreachable, wrong key, unknown model), a prompt too long."""


class PromptTooLong(JudgeError):
    """One request's prompt leaves no room for the reply in the judge's context: the
    request is named (``request``), so a run that skips such prompts can skip it alone."""

    def __init__(self, request: Any, message: str) -> None:
        super().__init__(message)
        self.request = request


@dataclass(frozen=True)
class JudgeParams:
    """Everything about a judge besides its model (a local directory or hub id, or the
    remote endpoint's model name) and its prompt versions."""

    backend: str = "local"
    mode: str = PER_STEP
    # Remote: the OpenAI-compatible base URL (``.../v1``) and the NAME of the environment
    # variable holding the key on the worker (never the key itself); "" sends no key.
    base_url: str = ""
    api_key_env: str = ""
    # Decoding.
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    # Ask for the chosen tokens' log-probabilities and this many alternatives, to turn
    # a per-step verdict into a probability.
    logprobs: bool = True
    top_logprobs: int = 5
    # The verdict: a regular expression whose first group is the verdict, and (per-step
    # mode) what each group text means, +1, 0 or -1, matched ignoring case.
    verdict_pattern: str = ""
    verdict_values: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_VALUES))
    # Remote: requests in flight at once, retries of 429 and 5xx answers (backoff doubles
    # from retry_base_seconds, capped at retry_max_seconds; Retry-After is honoured).
    concurrency: int = 8
    max_retries: int = 4
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 30.0
    timeout_seconds: float = 120.0
    # Local: prompts per generate batch, the context (prompt + reply), device and dtype.
    # Remote: max_length is the context when the endpoint's /models does not say it.
    batch_size: int = 8
    max_length: int = 4096
    # Remote: a tokenizer (directory or hub id, the served model's) to count prompts
    # with, so a prompt longer than the context fails the run before any chunk writes;
    # without one the endpoint's refusal (HTTP 400) fails the run at that chunk.
    tokenizer: str = ""
    device: str = "auto"
    dtype: str = "auto"
    # Steps per Celery task; replies are stored as they come, so a killed worker re-asks
    # only what has no reply yet.
    chunk_steps: int = 64

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.verdict_pattern or DEFAULT_PATTERNS[self.mode], re.IGNORECASE)

    @property
    def attribution(self) -> bool:
        """A failure-attribution mode: the run writes FailureVerdicts, not step scores."""
        return self.mode in ATTRIBUTION_MODES

    @property
    def rubric(self) -> bool:
        """The rubric mode: the run writes JudgeRubricMarks, not step scores."""
        return self.mode == RUBRIC

    @property
    def values_steps(self) -> bool:
        """A mode whose verdicts are step values (per-step, trajectory): a reward or a
        step scorer can use it."""
        return not (self.attribution or self.rubric)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def judge_params(raw: dict[str, Any] | None = None) -> JudgeParams:
    """Validated parameters: the defaults overlaid with ``raw``. A wrong name, type or
    value raises :class:`JudgeError` naming the parameter."""
    params = params_build(
        JudgeParams,
        raw,
        noun="judge",
        error=JudgeError,
        convert={"verdict_values": _verdict_values},
    )
    _check(params)
    return params


def _verdict_values(value: Any) -> dict[str, int]:
    name = "verdict_values"
    if not isinstance(value, dict) or not value:
        raise JudgeError(f"parameter {name!r} must be an object of text to +1, 0 or -1")
    for text, verdict in value.items():
        if verdict not in (-1, 0, 1) or isinstance(verdict, bool):
            raise JudgeError(f"parameter {name!r}: {text!r} must map to +1, 0 or -1")
    return {str(text).lower(): int(verdict) for text, verdict in value.items()}


def _check(params: JudgeParams) -> None:
    if params.backend not in BACKENDS:
        raise JudgeError(f"parameter 'backend' must be one of {', '.join(BACKENDS)}")
    if params.mode not in MODES:
        raise JudgeError(f"parameter 'mode' must be one of {', '.join(MODES)}")
    if params.backend == "remote" and not re.match(r"https?://[^/\s]+", params.base_url):
        raise JudgeError("parameter 'base_url' must be an http(s) URL for a remote judge")
    if params.api_key_env and not _ENV_NAME.fullmatch(params.api_key_env):
        raise JudgeError(
            "parameter 'api_key_env' is the NAME of an environment variable (letters,"
            " digits, '_'), not the key"
        )
    for name in ("max_tokens", "concurrency", "batch_size", "max_length", "chunk_steps"):
        if getattr(params, name) < 1:
            raise JudgeError(f"parameter {name!r} must be at least 1")
    if params.max_tokens >= params.max_length:
        raise JudgeError("parameter 'max_tokens' leaves no room for a prompt in 'max_length'")
    if not 0 <= params.top_logprobs <= 20:
        raise JudgeError("parameter 'top_logprobs' must be from 0 to 20")
    if params.temperature < 0 or not 0 < params.top_p <= 1:
        raise JudgeError("'temperature' cannot be negative and 'top_p' is in (0, 1]")
    if params.max_retries < 0 or params.retry_base_seconds < 0 or params.timeout_seconds <= 0:
        raise JudgeError("'max_retries' and 'retry_base_seconds' cannot be negative")
    if params.dtype not in ("auto", "fp32", "bf16", "fp16"):
        raise JudgeError("parameter 'dtype' must be one of auto, fp32, bf16, fp16")
    if not params.values_steps and params.verdict_pattern:
        raise JudgeError(
            f"parameter 'verdict_pattern' is for the per-step and trajectory modes; mode"
            f" {params.mode!r} reads its own verdict format (see docs/architecture.md)"
        )
    if not params.values_steps:
        return
    try:
        pattern = params.pattern
    except re.error as error:
        raise JudgeError(
            f"parameter 'verdict_pattern' is not a regular expression: {error}"
        ) from None
    if pattern.groups < 1:
        raise JudgeError("parameter 'verdict_pattern' needs a group around the verdict")


def template_check(mode: str, *texts: str) -> None:
    """Refuse a template (system or user text) naming a placeholder ``mode`` does not
    offer, or with unbalanced braces, saying which."""
    allowed = PLACEHOLDERS[mode]
    for text in texts:
        try:
            parts = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(text)]
        except ValueError as error:
            raise JudgeError(f"template: {error} (write literal braces as {{{{ and }}}})") from None
        for name, spec, conversion in parts:
            if name is None:
                continue
            if name not in allowed:
                known = ", ".join("{" + n + "}" for n in allowed)
                shown = "{" + name + "}" if name else "{}"
                raise JudgeError(
                    f"template: unknown placeholder {shown} for mode {mode!r}; known: {known}"
                    " (write literal braces as {{ and }})"
                )
            if spec or conversion:
                raise JudgeError(f"template: {{{name}}} takes no format spec or conversion")
