"""Runs stored as OpenAI chat messages, such as tau-bench's historical trajectories.

A run is an object with its messages under ``traj`` (tau-bench) or ``messages``, plus
optional ``task_id``, ``trial``, ``id``, ``model``, ``reward`` and ``info``. A file holds a
JSON array of runs, a single run object, or JSON Lines of runs; the first non-space
character decides (``[`` is an array; ``{`` is one object if the whole file parses,
otherwise JSON Lines).

Every message becomes one step, in order, so step indices match message indices. Only
assistant messages are labelable: they are the agent's decisions, while system, user and
tool messages are its inputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonio, jsonstream, register
from trajectories.formats.base import (
    FieldError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
    tool_call_step,
)

INPUT_ROLES = ("system", "developer", "user")
# "function" is the role of tool results in the API before tool_calls existed.
TOOL_ROLES = ("tool", "function")
TEXT_PART_TYPES = ("text", "input_text", "output_text")

# One entry of an iterator over a file's runs: where it is, its position among the
# runs, and the decoded record; or the error for a line that is not JSON.
Entry = tuple[str, int, Any] | RecordError


@register(
    "openai-messages", label="OpenAI chat messages with tool calls (tau-bench, mini-swe-agent)"
)
def parse(path: Path) -> Iterator[ParseResult]:
    for entry in _entries(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, index, record = entry
        try:
            yield _trajectory(record, index, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)


def _entries(path: Path) -> Iterator[Entry]:
    """Runs one at a time: a JSON array streamed item by item, JSON Lines line by line,
    or one run object."""
    for index, entry in enumerate(jsonstream.iter_records(path)):
        if isinstance(entry, RecordError):
            yield entry
        else:
            location, record = entry
            yield location, index, record


def _trajectory(record: Any, index: int, location: str) -> ParsedTrajectory:
    if not isinstance(record, dict):
        raise FieldError("", f"expected a run object, got {type(record).__name__}")
    key = "messages" if "messages" in record and "traj" not in record else "traj"
    if key not in record:
        raise FieldError("traj", "is missing; a run keeps its messages under traj or messages")
    messages = require(record, key, list)
    if not messages:
        raise FieldError(key, "is empty; a run needs at least one message")

    steps: list[ParsedStep] = []
    # Tool results in the OpenAI API carry only the id of the call they answer; the
    # tool's name comes from the assistant message that made the call.
    names_by_call_id: dict[str, str] = {}
    for number, message in enumerate(messages):
        step = _step(message, f"{key}.{number}", names_by_call_id)
        for call in step.metadata.get("tool_calls", []):
            if call["id"]:
                names_by_call_id[call["id"]] = call["name"]
        steps.append(step)

    task_id = _optional(record, "task_id", (str, int))
    trial = _optional(record, "trial", (str, int))
    record_id = _optional(record, "id", (str, int))
    if task_id is not None and trial is not None:
        external_id = f"{task_id}:{trial}"
    elif record_id is not None:
        external_id = str(record_id)
    else:
        external_id = str(index)
    if external_id.strip() in {"", ":"}:
        raise FieldError("id" if record_id is not None else "task_id", "is empty")

    reward = _optional(record, "reward", (int, float))
    return ParsedTrajectory(
        external_id=external_id,
        task=_task(record, steps, key),
        steps=steps,
        task_key="" if task_id is None else str(task_id),
        model_name=_optional(record, "model", str) or "",
        outcome_reward=None if reward is None else float(reward),
        success=None if reward is None else reward >= 1.0,
        metadata={
            name: value
            for name, value in record.items()
            if name not in ("traj", "messages", "reward", "model")
        },
        raw=record,
        location=location,
    )


def run_parse(record: Any, index: int, location: str) -> ParsedTrajectory:
    """One run already decoded (an API body's item), checked as a file's run is; a
    problem raises :class:`FieldError` naming the field (``messages.2.role``)."""
    return _trajectory(record, index, location)


def _task(record: dict[str, Any], steps: list[ParsedStep], key: str) -> str:
    """tau-bench states the task as the simulated user's instruction; without one, the
    task is what the user first asked."""
    info = record.get("info")
    task = info.get("task") if isinstance(info, dict) else None
    if isinstance(task, dict) and task.get("instruction") is not None:
        return str(require(task, "instruction", str, "info.task"))
    for step in steps:
        if step.role == "user" and step.content.strip():
            return step.content
    raise FieldError(key, "has no user message to take the task from, and no info.task.instruction")


def message_step(message: Any, path: str, names_by_call_id: dict[str, str]) -> ParsedStep:
    """One OpenAI chat message as a step (``path`` names it in errors); tool results take
    their tool's name from ``names_by_call_id``. The other chat-message formats
    (``verifiers``) read their messages with it."""
    return _step(message, path, names_by_call_id)


def _step(message: Any, path: str, names_by_call_id: dict[str, str]) -> ParsedStep:
    if not isinstance(message, dict):
        raise FieldError(path, f"expected a message object, got {type(message).__name__}")
    role = require(message, "role", str, path)
    content, skipped_parts = _text(message.get("content"), f"{path}.content")
    metadata: dict[str, Any] = {"non_text_parts": skipped_parts} if skipped_parts else {}
    agent = "" if role in TOOL_ROLES else (_optional(message, "name", str, path) or "")

    if role in INPUT_ROLES:
        return ParsedStep(
            kind="message",
            role=role,
            content=content,
            labelable=False,
            agent=agent,
            metadata=metadata,
        )
    if role in TOOL_ROLES:
        call_id = _optional(message, "tool_call_id", str, path) or ""
        if call_id:
            metadata["tool_call_id"] = call_id
        name = _optional(message, "name", str, path) or names_by_call_id.get(call_id, "")
        return ParsedStep(
            kind="tool_result",
            role="tool",
            content=content,
            labelable=False,
            tool_name=name,
            metadata=metadata,
        )
    if role != "assistant":
        raise FieldError(
            f"{path}.role",
            f"is {role!r}; expected one of {', '.join((*INPUT_ROLES, 'assistant', 'tool'))}",
        )

    calls, errors = _tool_calls(message, path)
    if not calls:
        return ParsedStep(
            kind="message",
            role="assistant",
            content=content,
            labelable=True,
            agent=agent,
            metadata=metadata,
        )
    metadata["tool_calls"] = calls
    return tool_call_step(
        content=content, calls=calls, metadata=metadata, errors=errors, agent=agent
    )


def _tool_calls(message: dict[str, Any], path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The message's calls as ``{"id", "name", "arguments"}`` with the arguments
    decoded, and a message for each call whose arguments are not JSON. Such calls keep
    the raw string: models do emit broken arguments, and that is worth seeing and
    labeling, not a reason to drop the run."""
    functions: list[tuple[str, dict[str, Any], str]] = []
    raw_calls = _optional(message, "tool_calls", list, path) or []
    for number, call in enumerate(raw_calls):
        call_path = f"{path}.tool_calls.{number}"
        if not isinstance(call, dict):
            raise FieldError(call_path, f"expected a tool call object, got {type(call).__name__}")
        function = require(call, "function", dict, call_path)
        call_id = _optional(call, "id", str, call_path) or ""
        functions.append((call_id, function, f"{call_path}.function"))
    legacy_call = _optional(message, "function_call", dict, path)
    if legacy_call is not None and not functions:
        functions.append(("", legacy_call, f"{path}.function_call"))

    calls = []
    errors = []
    for number, (call_id, function, function_path) in enumerate(functions):
        name = require(function, "name", str, function_path)
        arguments = require(function, "arguments", (str, dict, list), function_path)
        if isinstance(arguments, str):
            try:
                arguments = jsonio.loads(arguments)
            except ValueError as error:
                prefix = f"call {number} ({name}): " if len(functions) > 1 else ""
                errors.append(f"{prefix}arguments are not JSON: {jsonio.error_message(error)}")
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    return calls, errors


def _text(content: Any, path: str) -> tuple[str, list[str]]:
    """Message text, and the types of content parts that carry no text (images,
    audio), which are left out."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise FieldError(
            path, f"expected str, a list of content parts or null, got {type(content).__name__}"
        )
    texts = []
    skipped = []
    for number, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in TEXT_PART_TYPES:
            texts.append(require(part, "text", str, f"{path}.{number}"))
        elif isinstance(part, dict):
            skipped.append(str(part.get("type", "")))
        else:
            raise FieldError(
                f"{path}.{number}", f"expected a content part object, got {type(part).__name__}"
            )
    return "\n".join(texts), skipped


def _optional(
    record: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str = ""
) -> Any:
    """``record[key]`` checked like :func:`require`, or None when absent or null."""
    if record.get(key) is None:
        return None
    return require(record, key, kind, path)
