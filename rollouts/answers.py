"""Answer checks: did a finished continuation reach the trajectory's ground truth? No
Django, no torch.

    exact               the extracted answer equals the ground truth after normalisation
    boxed               the last ``\\boxed{...}`` of the continuation, normalised, equals it
    numeric[:TOL]       the extracted answer's number is within TOL (relative, default
                        1e-6) of the ground truth's
    python:MOD:FUNC     ``MOD.FUNC(trajectory, continuation) -> bool`` decides

The answer is taken from the trajectory's last step: the last ``\\boxed{}``, else what
follows the last "answer is" / "answer:" / "####", else the whole step. A continuation
cut off by ``max_new_tokens`` never succeeds under a built-in check: it gave no answer.
"""

# Django-free: answer checks on plain strings.
from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KINDS = ("exact", "boxed", "numeric", "python")
DEFAULT_CHECK = "numeric"
DEFAULT_TOLERANCE = 1e-6


class AnswerCheckError(ValueError):
    """A check that cannot be used as written (unknown kind, bad tolerance, an entry
    point that does not import)."""


@dataclass(frozen=True)
class CheckedStep:
    content: str
    role: str = "assistant"
    kind: str = "thought"


@dataclass(frozen=True)
class CheckedTrajectory:
    """What a Python entry point receives: the trajectory continued from."""

    task: str
    ground_truth: str
    steps: tuple[CheckedStep, ...]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckedContinuation:
    """The continuation: the prefix kept from the trajectory, then the generated steps."""

    prefix_steps: tuple[CheckedStep, ...]
    generated_steps: tuple[str, ...]
    text: str
    finished: bool

    @property
    def last_text(self) -> str:
        if self.generated_steps:
            return self.generated_steps[-1]
        return self.prefix_steps[-1].content if self.prefix_steps else ""

    @property
    def all_text(self) -> str:
        return "\n".join([*(s.content for s in self.prefix_steps), *self.generated_steps])


@dataclass(frozen=True)
class AnswerCheck:
    kind: str
    tolerance: float = DEFAULT_TOLERANCE
    entry_point: str = ""

    def __str__(self) -> str:
        if self.kind == "python":
            return f"python:{self.entry_point}"
        if self.kind == "numeric" and self.tolerance != DEFAULT_TOLERANCE:
            return f"numeric:{self.tolerance:g}"
        return self.kind


def check_parse(text: str) -> AnswerCheck:
    """Parse a check as written in a job or on the command line."""
    text = (text or DEFAULT_CHECK).strip()
    kind, _, rest = text.partition(":")
    if kind in ("exact", "boxed") and not rest:
        return AnswerCheck(kind)
    if kind == "numeric":
        if not rest:
            return AnswerCheck(kind)
        try:
            tolerance = float(rest)
        except ValueError:
            raise AnswerCheckError(f"numeric tolerance {rest!r} is not a number") from None
        if not 0 <= tolerance < 1 or math.isnan(tolerance):
            raise AnswerCheckError("numeric tolerance must be at least 0 and below 1")
        return AnswerCheck(kind, tolerance=tolerance)
    if kind == "python":
        module, _, function = rest.partition(":")
        if not module or not function.isidentifier():
            raise AnswerCheckError("a Python check is written python:package.module:function")
        return AnswerCheck(kind, entry_point=rest)
    raise AnswerCheckError(
        f"unknown answer check {text!r}; use exact, boxed, numeric[:TOL] or python:MOD:FUNC"
    )


def entry_point_load(entry_point: str) -> Callable[[CheckedTrajectory, CheckedContinuation], Any]:
    module_name, _, function_name = entry_point.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise AnswerCheckError(f"cannot import {module_name!r}: {error}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise AnswerCheckError(f"{module_name} has no function {function_name!r}")
    return function


def check_answer(
    check: AnswerCheck, trajectory: CheckedTrajectory, continuation: CheckedContinuation
) -> bool:
    """Whether ``continuation`` succeeded."""
    if check.kind == "python":
        return bool(entry_point_load(check.entry_point)(trajectory, continuation))
    if not continuation.finished or not trajectory.ground_truth.strip():
        return False
    if check.kind == "boxed":
        found = last_boxed(continuation.text or continuation.last_text)
        return found is not None and normalise(found) == normalise(truth_answer(trajectory))
    answer = extract_answer(continuation.last_text)
    truth = truth_answer(trajectory)
    if check.kind == "exact":
        return normalise(answer) == normalise(truth)
    return numbers_match(answer, truth, check.tolerance)


def truth_answer(trajectory: CheckedTrajectory) -> str:
    """The ground truth as an answer: GSM8K's ``#### 72`` and a boxed value unwrapped."""
    truth = trajectory.ground_truth
    boxed = last_boxed(truth)
    if boxed is not None:
        return boxed
    if "####" in truth:
        return truth.rsplit("####", 1)[1]
    return truth


_ANSWER_MARKER = re.compile(r"(?:answer\s*(?:is|:)|####)", re.IGNORECASE)


def extract_answer(text: str) -> str:
    """The answer a step gives: the last ``\\boxed{}``, else what follows the last
    answer marker, else the whole text."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        return text[markers[-1].end() :]
    return text


def last_boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    position = text.index("{", start) + 1
    depth = 1
    for end in range(position, len(text)):
        if text[end] == "{":
            depth += 1
        elif text[end] == "}":
            depth -= 1
            if depth == 0:
                return text[position:end]
    return None


_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def normalise(text: str) -> str:
    """Lower case, LaTeX wrappers and dollar signs gone, whitespace collapsed, trailing
    full stop dropped: ``The answer is $\\text{Paris}$.`` and ``paris`` compare equal."""
    text = _TEXT_WRAPPER.sub(r"\1", text)
    text = text.replace("$", "").replace("\\!", "").replace("\\,", "").replace("\\ ", " ")
    text = " ".join(text.lower().split())
    return text.strip().rstrip(".").strip()


_NUMBER = re.compile(
    r"(?P<frac>\\d?frac\{(?P<num>-?[\d.]+)\}\{(?P<den>-?[\d.]+)\})"
    r"|(?P<plain>-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?)"
    r"|(?P<lead>-?\.\d+)"
)


def parse_number(text: str) -> float | None:
    """The last number in ``text``: ``1,234``, ``-3.5``, ``2e3``, ``3/4``, ``\\frac{3}{4}``,
    ``12%`` (as 12). None when there is none."""
    matches = list(_NUMBER.finditer(text))
    if not matches:
        return None
    match = matches[-1]
    try:
        if match.group("frac"):
            return float(match.group("num")) / float(match.group("den"))
        raw = (match.group("plain") or match.group("lead")).replace(",", "")
        if "/" in raw:
            numerator, denominator = (float(part) for part in raw.split("/"))
            return numerator / denominator
        return float(raw)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_match(answer: str, truth: str, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    got, expected = parse_number(answer), parse_number(truth)
    if got is None or expected is None:
        return False
    return math.isclose(got, expected, rel_tol=tolerance, abs_tol=tolerance)
