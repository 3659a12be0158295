"""How steps read as text in exported records (no Django).

Every builder renders steps the same way, so a step's text in a TRL completion, a DPO
pair, a KTO row and an RL row is the same string:

- ``step_text``: the step's content. A ``tool_call`` step with a tool name adds a line
  ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` (arguments with sorted keys;
  no arguments are written as ``{}``), after a newline when the content is not empty.
- ``prompt_text``: the task, then each earlier step, every part followed by a blank line
  (``"\\n\\n"``), so a completion appended to it reads as the next paragraph. A step in
  the prompt whose role is not ``assistant``, or that names an agent, starts with
  ``[role] `` or ``[role/agent] ``. A non-labelable step whose content is exactly the
  task is left out: chat imports keep the user's question as a step and also as the task.
- ``chat_messages``: OpenAI chat messages, for SFT and verl prompts (see its docstring).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from exports.writers.inputs import ExportStep

PARAGRAPH = "\n\n"
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
INPUT_ROLES = ("system", "developer", "user")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def step_text(step: ExportStep) -> str:
    if step.kind != "tool_call" or not step.tool_name:
        return step.content
    arguments = {} if step.tool_args is None else step.tool_args
    body = f'{{"name": {_json(step.tool_name)}, "arguments": {_json(arguments)}}}'
    call = f"<tool_call>{body}</tool_call>"
    return f"{step.content}\n{call}" if step.content else call


def _marked(step: ExportStep) -> str:
    if step.role == "assistant" and not step.agent:
        return step_text(step)
    who = f"{step.role}/{step.agent}" if step.agent else step.role
    return f"[{who}] {step_text(step)}"


def prompt_text(task: str, steps: Sequence[ExportStep]) -> str:
    """The task and ``steps`` (the steps before the one the prompt leads to) as text."""
    parts = [task]
    parts.extend(_marked(step) for step in steps if step.labelable or step.content != task)
    return "".join(part + PARAGRAPH for part in parts)


def chat_messages(task: str, steps: Sequence[ExportStep]) -> list[dict[str, Any]]:
    """``steps`` as OpenAI chat messages.

    - System, developer and user steps keep their role. If no step is a user turn, the
      task is inserted as one, after any leading system or developer messages.
    - A ``tool_call`` step is an assistant message with ``tool_calls``: the calls listed
      in ``metadata.tool_calls`` (as the OpenAI-messages and Inspect importers keep them)
      or else one call from ``tool_name`` and ``tool_args``; ``arguments`` is a JSON
      string, as OpenAI sends it (a string kept from a broken call stays as it was).
    - A ``tool`` step (or a ``tool_result``) is a tool message with ``tool_call_id``
      (from ``metadata.tool_call_id``) and ``name`` when known.
    - Consecutive plain assistant steps of the same agent are one message, their
      contents joined by a blank line (a chain of thought is one answer).
    - An agent's name goes in ``name``. A step with a role of its own (not an OpenAI
      role) is an assistant message when labelable, else a user message, named after
      its agent or its role.

    Keys are written only when they hold something, as OpenAI's own messages do.
    """
    messages: list[dict[str, Any]] = []
    for step in steps:
        message = _message(step)
        previous = messages[-1] if messages else None
        if (
            previous is not None
            and _plain_assistant(previous)
            and _plain_assistant(message)
            and previous.get("name") == message.get("name")
        ):
            previous["content"] = previous["content"] + PARAGRAPH + message["content"]
            continue
        messages.append(message)
    if not any(message["role"] == "user" for message in messages):
        position = 0
        while position < len(messages) and messages[position]["role"] in ("system", "developer"):
            position += 1
        messages.insert(position, {"role": "user", "content": task})
    return messages


def _plain_assistant(message: dict[str, Any]) -> bool:
    return message["role"] == "assistant" and "tool_calls" not in message


def _message(step: ExportStep) -> dict[str, Any]:
    name = step.agent
    role = step.role
    if step.kind == "tool_result" or role == "tool":
        message: dict[str, Any] = {"role": "tool", "content": step.content}
        call_id = step.metadata.get("tool_call_id")
        if isinstance(call_id, str) and call_id:
            message["tool_call_id"] = call_id
        if step.tool_name:
            message["name"] = step.tool_name
        return message
    if role not in CHAT_ROLES:
        name = name or role
        role = "assistant" if step.labelable else "user"
    message = {"role": role, "content": step.content}
    if name:
        message["name"] = name
    if role == "assistant" and step.kind == "tool_call":
        message["tool_calls"] = _tool_calls(step)
    return message


def _tool_calls(step: ExportStep) -> list[dict[str, Any]]:
    listed = step.metadata.get("tool_calls")
    if isinstance(listed, list) and listed and all(isinstance(call, dict) for call in listed):
        calls = [(call.get("id"), call.get("name"), call.get("arguments")) for call in listed]
    else:
        calls = [("", step.tool_name, step.tool_args)]
    return [
        {
            "id": call_id if isinstance(call_id, str) else "",
            "type": "function",
            "function": {
                "name": name if isinstance(name, str) else "",
                "arguments": arguments
                if isinstance(arguments, str)
                else _json({} if arguments is None else arguments),
            },
        }
        for call_id, name, arguments in calls
    ]
