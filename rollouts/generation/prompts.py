"""A prefix → the prompt a policy continues, and generated text → steps. Pure Python;
the chat format takes the tokenizer only for its template."""

from __future__ import annotations

import re
from typing import Any, Protocol

from rollouts.generation.base import PolicyError, PolicyParams, PrefixStep

# Roles a chat template knows; anything else (an agent's name, "") speaks as the assistant.
CHAT_ROLES = ("system", "user", "assistant", "tool")


class ChatTemplating(Protocol):
    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...


def step_text(params: PolicyParams, step: PrefixStep, index: int) -> str:
    return params.step_format.format(
        content=step.content, role=step.role, index=index, number=index + 1
    )


def render_prompt(
    params: PolicyParams,
    task: str,
    steps: tuple[PrefixStep, ...] | list[PrefixStep],
    *,
    tokenizer: ChatTemplating | None = None,
) -> str:
    """The text the policy continues: the task and the prefix steps, ending where the
    next step starts."""
    if params.prompt_format == "plain":
        head = params.task_format.format(task=task)
        if not steps:
            return head
        body = params.step_join.join(step_text(params, s, i) for i, s in enumerate(steps))
        return head + body + params.step_join
    return _render_chat(params, task, steps, tokenizer)


def _render_chat(
    params: PolicyParams,
    task: str,
    steps: tuple[PrefixStep, ...] | list[PrefixStep],
    tokenizer: ChatTemplating | None,
) -> str:
    if tokenizer is None:
        raise PolicyError("the chat prompt format needs a tokenizer with a chat template")
    messages: list[dict[str, str]] = []
    if params.system_prompt:
        messages.append({"role": "system", "content": params.system_prompt})
    messages.append({"role": "user", "content": task})
    # Consecutive steps of one speaker form one message, as they were one turn.
    for index, step in enumerate(steps):
        role = step.role if step.role in CHAT_ROLES else "assistant"
        text = step_text(params, step, index)
        if messages[-1]["role"] == role and role != "system":
            messages[-1]["content"] += params.step_join + text
        else:
            messages.append({"role": role, "content": text})
    if messages[-1]["role"] != "assistant":
        # The policy opens a new assistant turn.
        return _template(tokenizer, messages, add_generation_prompt=True)
    # Continue the assistant's turn in place: render it whole and cut right after its
    # content plus the step separator, found from the end so the task cannot match.
    last = messages[-1]["content"] + params.step_join
    messages[-1] = {"role": "assistant", "content": last}
    text = _template(tokenizer, messages, add_generation_prompt=False)
    end = text.rfind(last)
    if end < 0:
        raise PolicyError("the chat template changed the assistant text; cannot continue it")
    return text[: end + len(last)]


def _template(tokenizer: ChatTemplating, messages: list[dict[str, str]], **options: Any) -> str:
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    except Exception as error:  # jinja errors, a tokenizer without a template
        raise PolicyError(f"chat template failed: {error}") from error
    if not isinstance(text, str):
        raise PolicyError("chat template did not render to text")
    return text


def cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found."""
    positions = [text.find(s) for s in stops]
    found = [p for p in positions if p >= 0]
    if not found:
        return text, False
    return text[: min(found)], True


# A final answer: "the answer is 4", "Answer: 4", GSM8K's "#### 4" or a \boxed{4}, with
# the answer itself on the same line.
_FINAL_ANSWER = re.compile(r"(?:answer\s*(?:is|:)|####)[^\S\n]*\S|\\boxed\{", re.IGNORECASE)


def cut_at_final_answer(text: str) -> tuple[str, bool]:
    """``text`` up to the end of the line that gives the first final answer, and whether
    there was one: a continuation is done once it has answered, and what a small model
    writes after that (more steps, another answer) is neither shown nor checked."""
    found = _FINAL_ANSWER.search(text)
    if found is None:
        return text, False
    end = text.find("\n", found.end())
    if end < 0:
        return text, True
    return text[:end], True


def split_steps(params: PolicyParams, text: str) -> tuple[str, ...]:
    """Generated text as steps: cut at ``step_join``, blank pieces dropped."""
    return tuple(piece.strip() for piece in text.split(params.step_join) if piece.strip())
