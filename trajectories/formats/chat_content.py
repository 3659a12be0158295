"""Reading what a model said and which tools it called, whatever vendor shape the
recording tool kept it in.

Tracing tools store a model call's input and output as the provider's own JSON: OpenAI
chat messages and ``chat.completion`` objects, OpenAI Responses ``output`` items,
Anthropic content blocks, Gemini ``parts``, OpenTelemetry GenAI ``parts``, LangChain
messages, or plain strings. The trace importers (``otel``, ``langfuse``, ``langsmith``,
``agent-session``) all need the same two readings of such a value: its text and its tool
calls, and the first thing the user asked. Unknown shapes give no text rather than an
error: the value stays in the raw record, and a trace is worth importing without it.
"""

from __future__ import annotations

from typing import Any

from trajectories.formats import jsonio

# Part types whose text is what the model wrote or was told.
TEXT_TYPES = ("text", "input_text", "output_text", "summary_text")
USER_ROLES = ("user", "human")
# Nesting this deep is not a message any more; stop looking.
MAX_DEPTH = 12


def decode(value: Any) -> Any:
    """``value`` with JSON text decoded (trace tools store payloads as JSON text, some
    of it encoded twice); anything else, or a string that is not JSON, as it is."""
    for _ in range(3):
        if not (isinstance(value, str) and value.strip()[:1] in ("{", "[", '"')):
            return value
        try:
            value = jsonio.loads(value)
        except ValueError:
            return value
    return value


def output_text_and_calls(value: Any) -> tuple[str, list[dict[str, Any]]]:
    """The text of a model output and its tool calls as ``{"id", "name", "arguments"}``
    with the arguments decoded where they are JSON."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    _walk_output(decode(value), texts, calls, 0)
    return "\n".join(text for text in texts if text), calls


def first_user_text(value: Any) -> str:
    """The text of the first user message in a model input (a message list, or an
    object holding one under ``messages``, ``contents`` or ``input``), or a plain
    prompt string; ``""`` when there is none."""
    value = decode(value)
    messages = _message_list(value)
    if messages is None:
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            for key in ("prompt", "input", "question", "query", "task"):
                found = value.get(key)
                if isinstance(found, str) and found.strip():
                    return found
        return ""
    for message in messages:
        if isinstance(message, dict) and _role(message) in USER_ROLES:
            text, _ = output_text_and_calls(message)
            if text.strip():
                return text
    return ""


def _message_list(value: Any) -> list[Any] | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in ("messages", "contents", "input", "new_message"):
            found = value.get(key)
            if isinstance(found, list):
                return found
            if isinstance(found, dict) and "role" in found:
                return [found]
        if "role" in value:
            return [value]
    return None


def _role(message: dict[str, Any]) -> str:
    role = message.get("role", message.get("type", ""))
    return role if isinstance(role, str) else ""


def _walk_output(value: Any, texts: list[str], calls: list[dict[str, Any]], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        texts.append(value)
        return
    if isinstance(value, list):
        for item in value:
            _walk_output(item, texts, calls, depth + 1)
        return
    if not isinstance(value, dict):
        return
    call = _tool_call(value)
    if call is not None:
        calls.append(call)
        return
    kind = value.get("type")
    # A LangChain generation has both "text" and the "message" it came from; read the
    # message, which also holds the tool calls.
    plain_text = kind is None and isinstance(value.get("text"), str) and "message" not in value
    if kind in TEXT_TYPES or plain_text:
        text = value.get("text", value.get("content"))
        if isinstance(text, str):
            texts.append(text)
        return
    if kind in ("thinking", "reasoning", "tool_result", "function_call_output", "image"):
        return
    # Containers: an OpenAI completion, a Responses object, a Gemini response, a message.
    for key in ("choices", "generations", "output", "candidates", "message", "content", "parts"):
        if key in value:
            _walk_output(value[key], texts, calls, depth + 1)
            break
    for key in ("tool_calls", "function_call"):
        if isinstance(value.get(key), list | dict):
            _walk_output(value[key], texts, calls, depth + 1)
    kwargs = value.get("additional_kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("tool_calls"), list):
        _walk_output(kwargs["tool_calls"], texts, calls, depth + 1)


def _tool_call(value: dict[str, Any]) -> dict[str, Any] | None:
    """One tool call in any of the shapes providers use, or None."""
    kind = value.get("type")
    function = value.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        # OpenAI chat and OpenInference: {id, function: {name, arguments}}.
        return _call(value.get("id"), function["name"], function.get("arguments"))
    if kind in ("tool_use", "tool_call", "function_call", "toolCall", "custom_tool_call"):
        name = value.get("name")
        if isinstance(name, str):
            arguments = next(
                (value[key] for key in ("input", "arguments", "args") if key in value), None
            )
            return _call(value.get("call_id", value.get("id")), name, arguments)
    gemini = value.get("function_call")
    if kind is None and isinstance(gemini, dict) and isinstance(gemini.get("name"), str):
        return _call(gemini.get("id"), gemini["name"], gemini.get("args"))
    if kind is None and isinstance(value.get("name"), str) and "args" in value and "id" in value:
        # LangChain's tool_calls: {name, args, id}.
        return _call(value.get("id"), value["name"], value["args"])
    return None


def _call(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id if isinstance(call_id, str) else "",
        "name": name,
        "arguments": decode(arguments),
    }
