"""Reading a judge's reply: the verdict (the last match of the verdict pattern), the
critique (the reply before it) and, where the backend gave log-probabilities, the
probability that a per-step verdict is positive.

A reply whose verdict cannot be read is a parse failure: it keeps its raw text and never
becomes a score.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from scoring.judges.config import PER_STEP, JudgeParams

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
    -1 for none (trajectory). ``value``: per-step, 0..1 (1 correct), from log-probabilities
    where given, else +1 -> 1, 0 -> 0.5, -1 -> 0. ``error``: why it could not be read."""

    verdict: int | None
    value: float | None
    critique: str
    error: str = ""

    @property
    def parsed(self) -> bool:
        return not self.error


def verdict_read(
    params: JudgeParams, text: str, tokens: list[TokenLogprob] | None = None
) -> Verdict:
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
