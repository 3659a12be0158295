"""Trajectory → model input text, and where each step's score is read in the tokens.

The text carries a marker (the separator or tag) after each step that is scored; its
character span is recorded while the text is built, so a separator that also occurs
inside a step's own content is never mistaken for a marker. Tokenizing with offsets then
maps each marker to the token where the score is read.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Protocol

from scoring.prm.base import ScorerError, ScorerParams, StepInput, TrajectoryInput


class ChatTemplating(Protocol):
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class Rendered:
    text: str
    # Character offset just past each marker, and the step it belongs to, in order.
    marker_ends: tuple[int, ...]
    keys: tuple[int, ...]


class _Fields(dict[str, Any]):
    def __missing__(self, name: str) -> str:
        raise ScorerError(f"unknown placeholder {{{name}}} in a scorer format string")


def _step_text(params: ScorerParams, step: StepInput, index: int) -> str:
    fields = _Fields(content=step.text, role=step.role, index=index, number=index + 1)
    return params.step_format.format_map(fields)


def render_steps(
    params: ScorerParams, steps: tuple[StepInput, ...] | list[StepInput], *, mark: bool = True
) -> Rendered:
    """The steps alone (the assistant's part), with a marker after each labelable step."""
    parts: list[str] = []
    length = 0
    ends: list[int] = []
    keys: list[int] = []
    for index, step in enumerate(steps):
        if index:
            parts.append(params.step_join)
            length += len(params.step_join)
        text = _step_text(params, step, index)
        parts.append(text)
        length += len(text)
        if mark and step.labelable and params.separator:
            parts.append(params.separator)
            length += len(params.separator)
            ends.append(length)
            keys.append(step.key)
    return Rendered("".join(parts), tuple(ends), tuple(keys))


def render(
    params: ScorerParams,
    trajectory: TrajectoryInput,
    *,
    tokenizer: ChatTemplating | None = None,
    mark: bool = True,
) -> Rendered:
    """The whole model input for ``trajectory``: task and steps, plain or through the
    tokenizer's chat template."""
    steps = render_steps(params, trajectory.steps, mark=mark)
    if params.prompt_format == "plain":
        head = params.task_format.format_map(_Fields(task=trajectory.task))
        return _shifted(steps, head + steps.text, len(head))
    if tokenizer is None:
        raise ScorerError("the chat prompt format needs a tokenizer with a chat template")
    messages = []
    if params.system_prompt:
        messages.append({"role": "system", "content": params.system_prompt})
    messages.append({"role": "user", "content": trajectory.task})
    messages.append({"role": "assistant", "content": steps.text})
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception as error:  # jinja errors, a tokenizer without a template
        raise ScorerError(f"chat template failed: {error}") from error
    if not isinstance(text, str):
        raise ScorerError("chat template did not render to text")
    # The template embeds the assistant content verbatim; find it from the end so a
    # task that happens to contain the same text cannot shift the markers.
    start = text.rfind(steps.text)
    if start < 0:
        raise ScorerError("the chat template changed the assistant text; cannot place steps")
    return _shifted(steps, text, start)


def render_turns(
    params: ScorerParams, trajectory: TrajectoryInput, *, tokenizer: ChatTemplating
) -> Rendered:
    """RLHFlow-style PRM input: each labelable step is a user turn (the unlabelable steps
    before it joined in front of it, the task in front of the first) answered by the
    assistant with ``params.separator`` ("+"); its score is read where the model predicts
    that answer. Steps after the last labelable one add nothing a score could read.

    The marker of turn k is found in the chat of turns 0..k alone, which must be the start
    of the whole chat: then no later turn can move it, and an answer-like "+" inside a
    step's own text is never taken for the marker."""
    messages: list[dict[str, str]] = []
    if params.system_prompt:
        messages.append({"role": "system", "content": params.system_prompt})
    head = params.task_format.format_map(_Fields(task=trajectory.task))
    pending: list[str] = []
    keys: list[int] = []
    prefixes: list[str] = []
    for index, step in enumerate(trajectory.steps):
        pending.append(_step_text(params, step, index))
        if not step.labelable:
            continue
        content = params.step_join.join(pending)
        pending = []
        messages.append({"role": "user", "content": content if keys else head + content})
        messages.append({"role": "assistant", "content": params.separator})
        keys.append(step.key)
        prefixes.append(_chat_text(tokenizer, messages))
    if not keys:
        return Rendered("", (), ())
    text = prefixes[-1]
    ends: list[int] = []
    previous = 0
    for prefix in prefixes:
        answer = prefix.rfind(params.separator)
        if not text.startswith(prefix) or answer < previous:
            raise ScorerError(
                "the chat template renders earlier turns differently as the chat grows;"
                " cannot place the step answers"
            )
        ends.append(answer + len(params.separator))
        previous = len(prefix)
    return Rendered(text, tuple(ends), tuple(keys))


def _chat_text(tokenizer: ChatTemplating, messages: list[dict[str, str]]) -> str:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except Exception as error:  # jinja errors, a tokenizer without a template
        raise ScorerError(f"chat template failed: {error}") from error
    if not isinstance(text, str):
        raise ScorerError("chat template did not render to text")
    return text


def _shifted(steps: Rendered, text: str, offset: int) -> Rendered:
    return Rendered(text, tuple(end + offset for end in steps.marker_ends), steps.keys)


def marker_tokens(offsets: list[tuple[int, int]], marker_ends: tuple[int, ...]) -> list[int]:
    """The index of the token holding the last character of each marker.

    ``offsets`` is a fast tokenizer's offset mapping; special tokens added by the
    tokenizer (span (0, 0)) are never chosen.
    """
    token_ends = [end if end > start else -1 for start, end in offsets]
    # Offsets are non-decreasing for the tokens that carry text; skip the others.
    carrying = [i for i, end in enumerate(token_ends) if end >= 0]
    ends = [token_ends[i] for i in carrying]
    positions = []
    for marker_end in marker_ends:
        found = bisect.bisect_left(ends, marker_end)
        if found >= len(ends):
            raise ScorerError("a step marker fell outside the tokenized text")
        positions.append(carrying[found])
    return positions
