"""OpenHands event streams: one trajectory per conversation.

- **V0** trajectories (``*.json``): a JSON array of events ``{id, timestamp, source,
  message, action | observation, args | content + extras, cause, tool_call_metadata?}``,
  read one event at a time. An observation's ``cause`` is the id of the action it
  answers.
- **V1** agent-SDK conversations: a directory with ``base_state.json`` (the agent and
  LLM configuration) and ``events/event-NNNNN-<id>.json``, one event per file, ``{id,
  timestamp, source, kind}`` with ``kind`` one of ``SystemPromptEvent``,
  ``MessageEvent``, ``ActionEvent``, ``ObservationEvent``. Import ``base_state.json``
  (or the directory): its events are read from beside it, in file-name order. A folder
  holding conversations imports each conversation once (:func:`units`), never its event
  files one by one; an event file given on its own is a file error saying which folder
  to import.

Events become steps in order. User messages and system prompts are inputs (not
labelable); the agent's messages, thoughts and actions are labelable (an action with a
tool is a ``tool_call`` with ``tool_name`` and ``tool_args``); observations are the
environment's answers (``tool_result`` or ``observation``, not labelable). Events that
only track the agent's state (``change_agent_state``, ``agent_state_changed``, empty
``null`` observations) make no step. Metadata keeps ``event_id``, ``parent_span_id``
(the ``cause`` or ``action_id``) and ``parent``, the index of the step that called it:
the action for an observation, and the user's message of the turn for the agent's
messages and actions (they name no cause). User messages and system prompts are roots,
as in the ``agent-session`` format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register
from trajectories.formats.base import (
    FieldError,
    FileError,
    ParsedStep,
    ParsedTrajectory,
    ParseResult,
    RecordError,
    require,
)
from trajectories.formats.chat_content import decode
from trajectories.formats.spans import depth_below

STATE_ACTIONS = ("change_agent_state",)
STATE_OBSERVATIONS = ("agent_state_changed", "null")
EVENT_FILE = re.compile(r"event-\d+-.*\.json")
INPUT_ROLES = ("user", "system")


@dataclass
class Events:
    """A conversation's steps so far, and which step each event and turn made."""

    steps: list[ParsedStep] = field(default_factory=list)
    index_of: dict[str, int] = field(default_factory=dict)
    turn: int | None = None  # the step of the current turn's user message

    def add(self, step: ParsedStep) -> None:
        parent_id = step.metadata.get("parent_span_id", "")
        if step.role in INPUT_ROLES:
            if step.role == "user":
                self.turn = len(self.steps)
        elif parent_id in self.index_of:
            step.metadata["parent"] = self.index_of[parent_id]
        elif self.turn is not None:
            step.metadata["parent"] = self.turn
        step.metadata["depth"] = depth_below(self.steps, step)
        self.index_of.setdefault(step.metadata["event_id"], len(self.steps))
        self.steps.append(step)


def units(folder: Path) -> list[Path]:
    """A folder's import units: each V1 conversation folder (the one holding
    ``base_state.json``) once, and each V0 ``.json`` file outside them."""
    if (folder / "base_state.json").is_file():
        return [folder]
    conversations = {state.parent for state in folder.rglob("base_state.json")}
    files = {
        path
        for path in folder.rglob("*.json")
        if path.is_file() and not conversations.intersection(path.parents)
    }
    return sorted(conversations | files)


@register("openhands", label="OpenHands event stream (V0 .json)", units=units)
def parse(path: Path) -> Iterator[ParseResult]:
    if path.is_dir():
        path = path / "base_state.json"
    if path.name == "base_state.json":
        yield from _v1(path)
        return
    conversation = path.parent.parent
    if EVENT_FILE.fullmatch(path.name) and (conversation / "base_state.json").exists():
        raise FileError(
            f"{path}: one event of the OpenHands conversation in {conversation}; "
            "import that folder (or its base_state.json) to read all its events"
        )
    events = Events()
    task = ""
    models: list[str] = []
    bad = False
    for location, event in jsonstream.iter_array(path):
        try:
            step = _v0_step(event, location)
        except FieldError as error:
            bad = True
            yield RecordError(location, error.field, error.message)
            continue
        if step is None:
            continue
        if step.role == "user" and not task:
            task = step.content
        model = step.metadata.get("model")
        if isinstance(model, str):
            models.append(model)
        events.add(step)
    if not events.steps:
        if not bad:
            yield RecordError("record 0", "", "the trajectory has no event to make a step of")
        return
    yield ParsedTrajectory(
        external_id=path.stem,
        task=task,
        steps=events.steps,
        model_name=models[0] if models else "",
        metadata={"version": "v0", "events": len(events.index_of)},
        location="record 0",
    )


def _v0_step(event: Any, location: str) -> ParsedStep | None:
    if not isinstance(event, dict):
        raise FieldError("", f"expected an event object, got {type(event).__name__}")
    event_id = event.get("id")
    if not isinstance(event_id, str | int) or isinstance(event_id, bool):
        raise FieldError("id", "is missing" if event_id is None else "expected str or int")
    source = require(event, "source", str)
    cause = event.get("cause")
    metadata: dict[str, Any] = {
        "event_id": str(event_id),
        "parent_span_id": "" if cause is None else str(cause),
        "source": source,
    }
    if isinstance(event.get("timestamp"), str):
        metadata["start"] = event["timestamp"]
    tool = event.get("tool_call_metadata")
    tool_name = ""
    if isinstance(tool, dict):
        tool_name = _string(tool.get("function_name"))
        if isinstance(tool.get("tool_call_id"), str):
            metadata["tool_call_id"] = tool["tool_call_id"]
        response = tool.get("model_response")
        # Observations repeat their action's model response; its usage counts once.
        if isinstance(response, dict) and "action" in event:
            if isinstance(response.get("model"), str):
                metadata["model"] = response["model"]
            usage = response.get("usage")
            if isinstance(usage, dict):
                metadata["tokens"] = {
                    key: usage[key]
                    for key in ("prompt_tokens", "completion_tokens", "total_tokens")
                    if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool)
                }
    message: str = event["message"] if isinstance(event.get("message"), str) else ""
    if "action" in event:
        action = require(event, "action", str)
        if action in STATE_ACTIONS:
            return None
        args: dict[str, Any] = event["args"] if isinstance(event.get("args"), dict) else {}
        metadata["action"] = action
        if source == "user":
            content = _string(args.get("content")) or message
            return ParsedStep(
                kind="message", role="user", content=content, labelable=False, metadata=metadata
            )
        thought = _string(args.get("thought"))
        if action == "message":
            content = _string(args.get("content")) or message
            return ParsedStep(
                kind="message", role="assistant", content=content, labelable=True, metadata=metadata
            )
        if action == "finish":
            final = args.get("final_thought") or args.get("outputs") or message
            content = final if isinstance(final, str) else json.dumps(final, sort_keys=True)
            return ParsedStep(
                kind="answer",
                role="assistant",
                content=content,
                labelable=True,
                tool_name=tool_name or "finish",
                tool_args=args,
                metadata=metadata,
            )
        return ParsedStep(
            kind="tool_call",
            role="assistant",
            content=thought or message,
            labelable=True,
            tool_name=tool_name or action,
            tool_args=args,
            metadata=metadata,
        )
    if "observation" in event:
        observation = require(event, "observation", str)
        if observation in STATE_OBSERVATIONS:
            return None
        metadata["observation"] = observation
        content = _string(event.get("content"))
        extras = event.get("extras")
        if isinstance(extras, dict) and isinstance(extras.get("metadata"), dict):
            metadata["result"] = extras["metadata"]
        return ParsedStep(
            kind="tool_result" if tool_name or cause is not None else "observation",
            role="tool",
            content=content or message,
            labelable=False,
            tool_name=tool_name or observation,
            metadata=metadata,
        )
    raise FieldError("action", "is missing; an event has an action or an observation")


# V1 agent SDK


def _v1(base_path: Path) -> Iterator[ParseResult]:
    base = jsonstream.load_file(base_path)
    if not isinstance(base, dict):
        raise FileError(f"{base_path}: expected the conversation's state object")
    folder = base_path.parent / "events"
    if not folder.is_dir():
        raise FileError(f"{base_path}: no events/ folder beside it")
    events = Events()
    task = ""
    for event_path in sorted(folder.glob("event-*.json")):
        location = f"events/{event_path.name}"
        try:
            event = jsonstream.load_file(event_path)
        except FileError as error:
            yield RecordError(location, "", str(error).removeprefix(f"{event_path}: "))
            continue
        try:
            step = _v1_step(event)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
            continue
        if step is None:
            continue
        if step.role == "user" and not task:
            task = step.content
        events.add(step)
    if not events.steps:
        yield RecordError("events", "", "the conversation has no event to make a step of")
        return
    agent = base.get("agent")
    llm = agent.get("llm") if isinstance(agent, dict) else None
    model = llm.get("model") if isinstance(llm, dict) else None
    conversation_id = base.get("id")
    return_id = conversation_id if isinstance(conversation_id, str) else base_path.parent.name
    yield ParsedTrajectory(
        external_id=return_id,
        task=task,
        steps=events.steps,
        model_name=model if isinstance(model, str) else "",
        metadata={"version": "v1", "events": len(events.index_of)},
        location=f"events/{sorted(folder.glob('event-*.json'))[0].name}",
    )


def _v1_step(event: Any) -> ParsedStep | None:
    if not isinstance(event, dict):
        raise FieldError("", f"expected an event object, got {type(event).__name__}")
    event_id = require(event, "id", str)
    kind = require(event, "kind", str)
    source = event.get("source") if isinstance(event.get("source"), str) else ""
    metadata: dict[str, Any] = {"event_id": event_id, "parent_span_id": "", "source": source}
    if isinstance(event.get("timestamp"), str):
        metadata["start"] = event["timestamp"]
    if kind == "SystemPromptEvent":
        prompt = event.get("system_prompt")
        text = prompt.get("text") if isinstance(prompt, dict) else prompt
        return ParsedStep(
            kind="message",
            role="system",
            content=text if isinstance(text, str) else "",
            labelable=False,
            metadata=metadata,
        )
    if kind == "MessageEvent":
        message = require(event, "llm_message", dict)
        role = require(message, "role", str, "llm_message")
        return ParsedStep(
            kind="message",
            role=role,
            content=_text(message.get("content")),
            labelable=role == "assistant",
            metadata=metadata,
        )
    if kind == "ActionEvent":
        tool_name = require(event, "tool_name", str)
        call = event.get("tool_call")
        arguments = decode(call.get("arguments")) if isinstance(call, dict) else event.get("action")
        if isinstance(event.get("tool_call_id"), str):
            metadata["tool_call_id"] = event["tool_call_id"]
        action = event.get("action")
        said = action.get("message") if isinstance(action, dict) else None
        return ParsedStep(
            kind="answer" if tool_name == "finish" else "tool_call",
            role="assistant",
            content=_text(event.get("thought")) or (said if isinstance(said, str) else ""),
            labelable=True,
            tool_name=tool_name,
            tool_args=arguments,
            metadata=metadata,
        )
    if kind == "ObservationEvent":
        observation = require(event, "observation", dict)
        action_id = event.get("action_id")
        metadata["parent_span_id"] = action_id if isinstance(action_id, str) else ""
        if observation.get("is_error") is True:
            metadata["is_error"] = True
        tool_name = event.get("tool_name")
        return ParsedStep(
            kind="tool_result",
            role="tool",
            content=_text(observation.get("content")),
            labelable=False,
            tool_name=tool_name if isinstance(tool_name, str) else "",
            metadata=metadata,
        )
    return None


def _string(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""
