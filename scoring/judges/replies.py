"""Reading a judge's reply: the verdict (the last match of the verdict pattern), the
critique (the reply before it) and, where the backend gave log-probabilities, the
probability that a per-step verdict is positive.

A reply whose verdict cannot be read is a parse failure: it keeps its raw text and never
becomes a score.

The failure-attribution modes read ``Key: value`` answers, the last of each kind in the
reply, case and markdown emphasis ignored (``**Step:** 4``): ``all-at-once`` a line
``Step: <n>`` (required; the step's index in the log) and a line ``Agent: <name>``
(optional; the step's agent where missing), each at the start of its line (a list
marker allowed); ``step-by-step`` ``Decisive: yes`` or ``Decisive: no``;
``binary-search`` ``Half: first`` or ``Half: second``, these two anywhere.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from scoring.judges.config import ALL_AT_ONCE, BINARY_SEARCH, PER_STEP, STEP_BY_STEP, JudgeParams

# A verdict's first character and the value it stands for, 0..1, when reading the
# alternatives at the verdict token: "+" and "1" positive, "0" neutral, "-" negative.
_SIGN_VALUES = {"+": 1.0, "1": 1.0, "0": 0.5, "-": 0.0}


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token, its log-probability and the most likely alternatives."""

    token: str
    logprob: float
    top: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """What a reply says. ``verdict``: +1/0/-1 (per-step) or the first wrong step's number,
    -1 for none (trajectory); the named step (all-at-once); 1 yes, 0 no (step-by-step);
    0 the first half, 1 the second (binary-search). ``value``: per-step, 0..1 (1
    correct), from log-probabilities where given, else +1 -> 1, 0 -> 0.5, -1 -> 0.
    ``agent``: the agent an all-at-once reply names. ``error``: why it could not be
    read."""

    verdict: int | None
    value: float | None
    critique: str
    error: str = ""
    agent: str = ""

    @property
    def parsed(self) -> bool:
        return not self.error


_LEAD = r"^[ \t>*_#`-]*"
_SEP = r"[ \t*_`]*:[ \t*_`]*"
_LINES = {
    "step": re.compile(_LEAD + r"step" + _SEP + r"#?(-?\d+)\b", re.IGNORECASE | re.MULTILINE),
    "agent": re.compile(
        _LEAD + r"agent" + _SEP + r"(.*?)[ \t*_`.]*$", re.IGNORECASE | re.MULTILINE
    ),
    STEP_BY_STEP: re.compile(r"\bdecisive" + _SEP + r"(yes|no)\b", re.IGNORECASE | re.MULTILINE),
    BINARY_SEARCH: re.compile(r"\bhalf" + _SEP + r"(first|second)\b", re.IGNORECASE | re.MULTILINE),
}
_ANSWERS = {"yes": 1, "no": 0, "first": 0, "second": 1}


def attribution_read(mode: str, text: str) -> Verdict:
    """An attribution mode's verdict (the formats in the module's docstring)."""
    if mode == ALL_AT_ONCE:
        steps = list(_LINES["step"].finditer(text))
        if not steps:
            return Verdict(None, None, text.strip(), error="no 'Step: <n>' line")
        step = steps[-1]
        agents = list(_LINES["agent"].finditer(text))
        agent = agents[-1] if agents else None
        start = min(step.start(), agent.start()) if agent else step.start()
        critique = text[:start].strip() or text.strip()
        name = agent.group(1).strip().strip("\"'<>") if agent else ""
        return Verdict(int(step.group(1)), None, critique, agent=name)
    matches = list(_LINES[mode].finditer(text))
    if not matches:
        wanted = "'Decisive: yes|no'" if mode == STEP_BY_STEP else "'Half: first|second'"
        return Verdict(None, None, text.strip(), error=f"no {wanted} line")
    match = matches[-1]
    critique = text[: match.start()].strip() or text.strip()
    return Verdict(_ANSWERS[match.group(1).lower()], None, critique)


def verdict_read(
    params: JudgeParams, text: str, tokens: list[TokenLogprob] | None = None
) -> Verdict:
    if params.attribution:
        return attribution_read(params.mode, text)
    matches = list(params.pattern.finditer(text))
    if not matches:
        return Verdict(None, None, text.strip(), error="no verdict matching the pattern")
    match = matches[-1]
    critique = text[: match.start()].strip() or text.strip()
    found = match.group(1)
    if params.mode != PER_STEP:
        try:
            return Verdict(int(found), None, critique)
        except ValueError:
            return Verdict(None, None, critique, error=f"verdict {found!r} is not a step number")
    verdict = params.verdict_values.get(found.strip().lower())
    if verdict is None:
        return Verdict(None, None, critique, error=f"verdict {found!r} is none of the known values")
    value = {1: 1.0, 0: 0.5, -1: 0.0}[verdict]
    if tokens:
        value = verdict_probability(tokens, match.start(1), fallback=value)
    return Verdict(verdict, value, critique)


def verdict_probability(tokens: list[TokenLogprob], at: int, *, fallback: float) -> float:
    """The expected verdict value, 0..1, over the alternatives at the token that writes
    the character at offset ``at`` of the reply: each alternative whose character there
    is a sign (+ 1 0 -) counts with its probability, renormalised over those. Falls back
    when the tokens do not cover ``at`` or no alternative is a sign."""
    start = 0
    for token in tokens:
        end = start + len(token.token)
        if start <= at < end:
            offset = at - start
            weighted = total = 0.0
            alternatives = dict(token.top)
            alternatives.setdefault(token.token, token.logprob)
            for text, logprob in alternatives.items():
                sign = _sign_at(text, offset)
                if sign is None or not math.isfinite(logprob):
                    continue
                p = math.exp(logprob)
                weighted += p * _SIGN_VALUES[sign]
                total += p
            return weighted / total if total > 0 else fallback
        start = end
    return fallback


def _sign_at(text: str, offset: int) -> str | None:
    # An alternative token may carry leading space or the brace before the verdict.
    stripped = re.sub(r"^[\s{]+", "", text) if offset == 0 else text
    position = 0 if offset == 0 else offset
    if position < len(stripped) and stripped[position] in _SIGN_VALUES:
        return stripped[position]
    return None
