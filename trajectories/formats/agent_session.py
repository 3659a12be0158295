"""Coding-agent session logs as the agent CLIs write them: one trajectory per file.

Three JSON Lines formats, told apart by the first line:

- **Claude Code** (``~/.claude/projects/<project>/<session>.jsonl``): lines of ``type``
  ``user`` / ``assistant`` with an Anthropic ``message``, threaded by ``uuid`` and
  ``parentUuid``; a subagent's messages arrive inside ``progress`` lines
  (``data.type = agent_progress``, ``data.agentId``) under the ``Task`` call that
  started it (``parentToolUseID``).
- **Codex CLI** (``~/.codex/sessions/.../rollout-*.jsonl``): ``{timestamp, type,
  payload}`` lines starting with ``session_meta``; ``response_item`` payloads are the
  conversation (``message``, ``reasoning``, ``function_call``, ``function_call_output``,
  ``custom_tool_call``, ``web_search_call``), ``event_msg`` payloads carry the user's
  prompt and token counts.
- **Pi** (``~/.pi/agent/sessions/...jsonl``): a ``session`` line, then ``message`` lines
  whose ``message.role`` is ``user``, ``assistant`` or ``toolResult``.

Every content block is a step, in file order: user text (not labelable), the model's
thinking (``thought``), text (``message``) and tool calls (``tool_call``, with
``tool_name`` and ``tool_args``), all labelable, and tool results (``tool_result``, not
labelable). Blank text and reasoning kept only encrypted are left out: there is nothing
to read or label. Lines that are bookkeeping (file snapshots, hooks, queue operations,
turn contexts, the event copies of messages) make no step.

Each step's metadata has ``event_id`` (the line's uuid, or the call id of a tool call and
its result), ``parent_span_id`` and ``parent``, the index of the step that called it: the
call for a tool result, the ``Task`` call for a subagent's steps, and the user's prompt
of the turn for the model's steps. A user's message starts a turn and is a root. The
tree is the same in all three formats, so a session is as deep as its calls nest, not as
long as it is. Claude Code's ``parentUuid`` (and Pi's ``parentId``) only thread each line
to the line before it; it is kept as ``thread_parent``.
"""

from __future__ import annotations

import json
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
)
from trajectories.formats.chat_content import decode
from trajectories.formats.spans import depth_below

CLAUDE_SKIPPED = ("file-history-snapshot", "queue-operation", "system", "summary")
CODEX_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")


@dataclass
class Session:
    """What a session's lines add up to while they are read."""

    source: str
    steps: list[ParsedStep] = field(default_factory=list)
    index_of: dict[str, int] = field(default_factory=dict)
    tool_names: dict[str, str] = field(default_factory=dict)
    seen_messages: set[str] = field(default_factory=set)
    turn_parent: str = ""  # event id of the current turn's user prompt
    # Claude Code's main thread and its sidechains each have their own turns.
    turn_parents: dict[str, str] = field(default_factory=dict)
    session_id: str = ""
    task: str = ""
    models: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    location: str = ""

    def add(self, step: ParsedStep, event_id: str, parent_id: str) -> None:
        step.metadata["event_id"] = event_id
        step.metadata["parent_span_id"] = parent_id
        if parent_id in self.index_of:
            step.metadata["parent"] = self.index_of[parent_id]
        step.metadata["depth"] = depth_below(self.steps, step)
        if event_id and event_id not in self.index_of:
            self.index_of[event_id] = len(self.steps)
        self.steps.append(step)


@register("agent-session", label="Agent CLI session (Claude Code, Codex, Pi)")
def parse(path: Path) -> Iterator[ParseResult]:
    session: Session | None = None
    for entry in jsonstream.iter_lines(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        if session is None:
            session = Session(source=_source(record), location=location)
        try:
            if not isinstance(record, dict):
                raise FieldError("", f"expected an object, got {type(record).__name__}")
            READERS[session.source](session, record, location)
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
    if session is None:
        raise FileError(f"{path}: is empty")
    if not session.steps:
        yield RecordError(session.location, "", "the session has no message to make a step of")
        return
    yield _trajectory(session, path)


def _source(record: dict[str, Any]) -> str:
    if record.get("type") in CODEX_TYPES and "payload" in record:
        return "codex"
    if record.get("type") == "session":
        return "pi"
    return "claude-code"


# Claude Code


def _claude_line(session: Session, record: dict[str, Any], location: str) -> None:
    kind = record.get("type")
    uuid = _text_field(record, "uuid")
    parent_uuid = _text_field(record, "parentUuid")
    session.session_id = session.session_id or _text_field(record, "sessionId")
    for key in ("version", "cwd", "gitBranch"):
        if isinstance(record.get(key), str) and key not in session.metadata:
            session.metadata[key] = record[key]
    if kind in ("user", "assistant"):
        agent = "sidechain" if record.get("isSidechain") is True else ""
        _claude_message(session, record, "message", uuid, parent_uuid, agent, caller="")
    elif kind == "progress":
        data = record.get("data")
        if isinstance(data, dict) and data.get("type") == "agent_progress":
            inner = data.get("message")
            if not isinstance(inner, dict):
                raise FieldError("data.message", "expected an object")
            agent = _text_field(data, "agentId") or "subagent"
            call_id = _text_field(record, "parentToolUseID")
            inner_uuid = _text_field(inner, "uuid")
            if inner_uuid in session.index_of:
                return  # progress lines repeat a subagent message once per update
            _claude_message(
                session,
                inner,
                "data.message.message",
                inner_uuid,
                _text_field(inner, "parentUuid"),
                agent,
                caller=call_id,
            )


def _claude_message(
    session: Session,
    record: dict[str, Any],
    path: str,
    uuid: str,
    thread_parent: str,
    agent: str,
    *,
    caller: str,
) -> None:
    """The steps of one message. ``caller`` is the id of the ``Task`` call whose subagent
    wrote it, or empty for the main thread and sidechains."""
    message = record.get("message")
    if not isinstance(message, dict):
        raise FieldError(path, "is missing" if message is None else "expected an object")
    role = message.get("role", record.get("type"))
    if role not in ("user", "assistant"):
        raise FieldError(f"{path}.role", f"is {role!r}; expected user or assistant")
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise FieldError(f"{path}.content", "expected a string or a list of content blocks")
    usage_key: str = message["id"] if isinstance(message.get("id"), str) else uuid
    started_turn = False
    for number, block in enumerate(blocks):
        where = f"{path}.content.{number}"
        if not isinstance(block, dict):
            raise FieldError(where, f"expected a content block, got {type(block).__name__}")
        step = _block_step(session, block, role, where, agent)
        if step is None:
            continue
        if "timestamp" in record:
            step.metadata["start"] = record["timestamp"]
        if role == "assistant" and usage_key not in session.seen_messages:
            # One API message spans several lines, each repeating its usage: count it once.
            session.seen_messages.add(usage_key)
            _claude_usage(step, message)
        if role == "user" and step.kind == "message" and not record.get("isMeta"):
            session.task = session.task or step.content
        event_id = uuid if number == 0 or not uuid else f"{uuid}:{number}"
        if thread_parent:
            step.metadata["thread_parent"] = thread_parent
        call_id = str(step.metadata.get("tool_call_id", ""))
        if step.kind == "tool_result" and call_id in session.index_of:
            parent = call_id
        elif caller:
            parent = caller
        elif role == "user" and step.kind == "message" and not started_turn:
            parent = ""
            session.turn_parents[agent] = event_id
            started_turn = True
        else:
            parent = session.turn_parents.get(agent, "")
        session.add(step, event_id, parent)
        if step.kind == "tool_call" and call_id:
            # Results and subagents name the call by its id, not by the line's uuid.
            session.index_of.setdefault(call_id, len(session.steps) - 1)


def _claude_usage(step: ParsedStep, message: dict[str, Any]) -> None:
    model = message.get("model")
    if isinstance(model, str):
        step.metadata["model"] = model
    usage = message.get("usage")
    if isinstance(usage, dict):
        tokens = {
            name: usage[key]
            for name, key in (
                ("input", "input_tokens"),
                ("output", "output_tokens"),
                ("cache_read", "cache_read_input_tokens"),
                ("cache_write", "cache_creation_input_tokens"),
            )
            if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool)
        }
        if tokens:
            step.metadata["tokens"] = tokens


def _block_step(
    session: Session, block: dict[str, Any], role: str, where: str, agent: str
) -> ParsedStep | None:
    """One Anthropic-style (or Pi) content block as a step, or None for a blank one."""
    kind = block.get("type")
    if kind == "text":
        text = _required_text(block, "text", where)
        if not text.strip():
            return None
        return ParsedStep(
            kind="message", role=role, content=text, labelable=role == "assistant", agent=agent
        )
    if kind == "thinking":
        text = _required_text(block, "thinking", where)
        if not text.strip():
            return None
        return ParsedStep(
            kind="thought", role="assistant", content=text, labelable=True, agent=agent
        )
    if kind in ("tool_use", "toolCall"):
        name = _required_text(block, "name", where)
        call_id = _text_field(block, "id")
        arguments = decode(block.get("input", block.get("arguments")))
        if call_id:
            session.tool_names[call_id] = name
        return ParsedStep(
            kind="tool_call",
            role="assistant",
            content="",
            labelable=True,
            agent=agent,
            tool_name=name,
            tool_args=arguments,
            metadata={"tool_call_id": call_id} if call_id else {},
        )
    if kind == "tool_result":
        call_id = _text_field(block, "tool_use_id")
        metadata: dict[str, Any] = {"tool_call_id": call_id}
        if block.get("is_error") is True:
            metadata["is_error"] = True
        return ParsedStep(
            kind="tool_result",
            role="tool",
            content=_blocks_text(block.get("content"), f"{where}.content"),
            labelable=False,
            agent=agent,
            tool_name=session.tool_names.get(call_id, ""),
            metadata=metadata,
        )
    if kind in ("image", "document", "redacted_thinking"):
        return None
    raise FieldError(f"{where}.type", f"is {kind!r}; not a content block this format has")


# Codex


def _codex_line(session: Session, record: dict[str, Any], location: str) -> None:
    kind = record.get("type")
    payload = record.get("payload")
    if not isinstance(payload, dict):
        raise FieldError("payload", "is missing" if payload is None else "expected an object")
    timestamp = record.get("timestamp")
    if kind == "session_meta":
        session.session_id = _text_field(payload, "id")
        for key in ("cli_version", "originator", "cwd", "model_provider"):
            if isinstance(payload.get(key), str):
                session.metadata[key] = payload[key]
        return
    if kind == "turn_context":
        model = payload.get("model")
        if isinstance(model, str):
            session.models.append(model)
        return
    if kind == "event_msg":
        _codex_event(session, payload)
        return
    if kind != "response_item":
        return
    item = payload.get("type")
    event_id = location
    parent = session.turn_parent
    if item == "message":
        role = _required_text(payload, "role", "payload")
        text = _blocks_text(payload.get("content"), "payload.content")
        if not text.strip():
            return
        step = ParsedStep(kind="message", role=role, content=text, labelable=role == "assistant")
        if role == "user":
            session.turn_parent = event_id
            parent = ""
    elif item == "reasoning":
        text = _blocks_text(payload.get("summary"), "payload.summary") or _blocks_text(
            payload.get("content"), "payload.content"
        )
        if not text.strip():
            return
        step = ParsedStep(kind="thought", role="assistant", content=text, labelable=True)
    elif item in ("function_call", "custom_tool_call", "web_search_call", "local_shell_call"):
        name = _text_field(payload, "name") or item.removesuffix("_call")
        call_id = _text_field(payload, "call_id") or _text_field(payload, "id")
        arguments = decode(payload.get("arguments", payload.get("input", payload.get("action"))))
        if call_id:
            session.tool_names[call_id] = name
            event_id = call_id
        step = ParsedStep(
            kind="tool_call",
            role="assistant",
            content="",
            labelable=True,
            tool_name=name,
            tool_args=arguments,
            metadata={"tool_call_id": call_id} if call_id else {},
        )
    elif item in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        call_id = _required_text(payload, "call_id", "payload")
        output = decode(payload.get("output"))
        metadata: dict[str, Any] = {"tool_call_id": call_id}
        if isinstance(output, dict) and isinstance(output.get("output"), str):
            if isinstance(output.get("metadata"), dict):
                metadata["result"] = output["metadata"]
            output = output["output"]
        step = ParsedStep(
            kind="tool_result",
            role="tool",
            content=output if isinstance(output, str) else _json_text(output),
            labelable=False,
            tool_name=session.tool_names.get(call_id, ""),
            metadata=metadata,
        )
        parent = call_id
    else:
        return  # ghost snapshots and other bookkeeping
    if isinstance(timestamp, str):
        step.metadata["start"] = timestamp
    session.add(step, event_id, parent)


def _codex_event(session: Session, payload: dict[str, Any]) -> None:
    kind = payload.get("type")
    if kind == "user_message" and not session.task:
        message = payload.get("message")
        session.task = message if isinstance(message, str) else ""
    elif kind == "token_count":
        info = payload.get("info")
        if not isinstance(info, dict):
            return
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        if isinstance(total, dict):
            session.metadata["tokens"] = total
        # The count follows the model call it measures: put it on that call's last step.
        for step in reversed(session.steps):
            if step.labelable:
                if "tokens" not in step.metadata and isinstance(last, dict):
                    step.metadata["tokens"] = last
                break
    elif kind == "task_complete":
        session.metadata["turns"] = session.metadata.get("turns", 0) + 1


# Pi


def _pi_line(session: Session, record: dict[str, Any], location: str) -> None:
    kind = record.get("type")
    if kind == "session":
        session.session_id = _text_field(record, "id")
        for key in ("provider", "modelId", "cwd", "version"):
            if key in record and key not in session.metadata:
                session.metadata[key] = record[key]
        return
    if kind != "message":
        return
    message = record.get("message")
    if not isinstance(message, dict):
        raise FieldError("message", "is missing" if message is None else "expected an object")
    role = _required_text(message, "role", "message")
    # Pi's newer sessions name entries by id and thread each to the one before by
    # parentId (kept as thread_parent); the tree follows turns and calls either way.
    entry_id = _text_field(record, "id") or location
    linked_parent = _text_field(record, "parentId")
    if role == "toolResult":
        call_id = _text_field(message, "toolCallId")
        metadata: dict[str, Any] = {"tool_call_id": call_id}
        if message.get("isError") is True:
            metadata["is_error"] = True
        step = ParsedStep(
            kind="tool_result",
            role="tool",
            content=_blocks_text(message.get("content"), "message.content"),
            labelable=False,
            tool_name=_text_field(message, "toolName") or session.tool_names.get(call_id, ""),
            metadata=metadata,
        )
        step.metadata["start"] = record.get("timestamp")
        if linked_parent:
            step.metadata["thread_parent"] = linked_parent
        from_call = call_id in session.index_of
        session.add(step, entry_id, call_id if from_call else session.turn_parent)
        return
    if role not in ("user", "assistant"):
        raise FieldError("message.role", f"is {role!r}; expected user, assistant or toolResult")
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise FieldError("message.content", "expected a string or a list of content blocks")
    parent = "" if role == "user" else session.turn_parent
    first = True
    for number, block in enumerate(blocks):
        where = f"message.content.{number}"
        if not isinstance(block, dict):
            raise FieldError(where, f"expected a content block, got {type(block).__name__}")
        block_step = _block_step(session, block, role, where, "")
        if block_step is None:
            continue
        step = block_step
        step.metadata["start"] = record.get("timestamp")
        if linked_parent:
            step.metadata["thread_parent"] = linked_parent
        if role == "user" and not session.task:
            session.task = step.content
        if role == "assistant" and first:
            _pi_usage(session, step, message)
        event_id = entry_id if first else f"{entry_id}:{number}"
        if step.kind == "tool_call" and step.metadata.get("tool_call_id"):
            event_id = step.metadata["tool_call_id"]
        session.add(step, event_id, parent)
        if role == "user" and first:
            # The prompt's first block starts the turn; the rest of it hangs below it.
            session.turn_parent = parent = event_id
        first = False


def _pi_usage(session: Session, step: ParsedStep, message: dict[str, Any]) -> None:
    model = message.get("model")
    if isinstance(model, str):
        step.metadata["model"] = model
        session.models.append(model)
    usage = message.get("usage")
    if isinstance(usage, dict):
        tokens = {
            key: usage[key]
            for key in ("input", "output", "cacheRead", "cacheWrite")
            if isinstance(usage.get(key), int) and not isinstance(usage.get(key), bool)
        }
        if tokens:
            step.metadata["tokens"] = tokens
        cost = usage.get("cost")
        total = cost.get("total") if isinstance(cost, dict) else None
        if isinstance(total, int | float) and not isinstance(total, bool):
            step.metadata["cost"] = total
    for key in ("stopReason", "errorMessage"):
        if isinstance(message.get(key), str):
            step.metadata[key] = message[key]


READERS = {"claude-code": _claude_line, "codex": _codex_line, "pi": _pi_line}


# Shared


def _trajectory(session: Session, path: Path) -> ParsedTrajectory:
    models = session.models or [
        step.metadata["model"]
        for step in session.steps
        if isinstance(step.metadata.get("model"), str)
    ]
    task = session.task or next((step.content for step in session.steps if step.role == "user"), "")
    metadata = {"source": session.source, "session_id": session.session_id, **session.metadata}
    if session.source != "codex":
        metadata["tokens"] = _token_totals(session.steps)
    costs = [step.metadata["cost"] for step in session.steps if "cost" in step.metadata]
    if costs:
        metadata["cost"] = round(sum(costs), 10)
    return ParsedTrajectory(
        external_id=session.session_id or path.stem,
        task=task,
        steps=session.steps,
        model_name=max(set(models), key=models.count) if models else "",
        metadata=metadata,
        location=session.location,
    )


def _token_totals(steps: list[ParsedStep]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for step in steps:
        tokens = step.metadata.get("tokens")
        if isinstance(tokens, dict):
            for key, value in tokens.items():
                totals[key] = totals.get(key, 0) + value
    return totals


def _blocks_text(content: Any, where: str) -> str:
    """Text of a string or a list of text parts (``text``, ``input_text``,
    ``output_text``, ``summary_text``); other parts (images) are left out."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise FieldError(
            where, f"expected a string or a list of parts, got {type(content).__name__}"
        )
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def _json_text(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _text_field(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    return value if isinstance(value, str) else ""


def _required_text(record: dict[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        name = f"{where}.{key}"
        raise FieldError(
            name, "is missing" if value is None else f"expected str, got {type(value).__name__}"
        )
    return value
