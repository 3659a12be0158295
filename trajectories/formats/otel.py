"""OpenTelemetry traces of LLM agents: one trajectory per trace id.

Files come in three shapes, all read through :func:`jsonstream.iter_records`:

- OTLP JSON, ``{"resourceSpans": [{"resource", "scopeSpans": [{"scope", "spans"}]}]}``,
  as one object, or one export request per line (the collector's file exporter);
- spans one by one: a JSON array or JSON Lines of span objects, in OTLP's shape
  (``traceId``, ``spanId``, ``parentSpanId``, ``startTimeUnixNano``, attributes as a
  list of ``{key, value}``), OpenTelemetry-JS's ``ReadableSpan`` (``spanContext``,
  ``[seconds, nanoseconds]`` times, attributes as an object) or the Python console
  exporter's (``context.trace_id``, ``parent_id``, ISO times);
- one span's attribute map on its own (the shape instrumentation libraries keep as test
  fixtures), read as a trace of one span named after the file.

Attributes follow either convention, or both: the GenAI semantic conventions
(``gen_ai.operation.name``, ``gen_ai.input.messages`` / ``gen_ai.output.messages``,
``gen_ai.usage.*``, ``gen_ai.tool.*``, ``gen_ai.agent.name``) and OpenInference
(``openinference.span.kind``, ``llm.input_messages.N.message.*`` flattened,
``llm.token_count.*``, ``tool.*``, ``input.value`` / ``output.value``). The Vercel AI
SDK's ``ai.*`` attributes are read too. Spans become steps as :mod:`spans` says.

Spans of one trace may be spread over the file, so the spans are gathered first (their
attributes, not the whole file's JSON) and the trajectories come out at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trajectories.formats import jsonstream, register, spans
from trajectories.formats.base import (
    FieldError,
    ParsedTrajectory,
    ParseResult,
    RecordError,
)
from trajectories.formats.chat_content import decode
from trajectories.formats.spans import Span

# OpenInference span kinds, and GenAI operation names, to the kinds steps are built from.
OPENINFERENCE_KINDS = {
    "LLM": "llm",
    "TOOL": "tool",
    "AGENT": "agent",
    "CHAIN": "chain",
    "RETRIEVER": "retriever",
    "EMBEDDING": "embedding",
    "RERANKER": "reranker",
    "GUARDRAIL": "guardrail",
    "EVALUATOR": "evaluator",
}
GENAI_OPERATIONS = {
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "execute_tool": "tool",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "embeddings": "embedding",
}
ERROR_CODES = (2, "2", "STATUS_CODE_ERROR", "ERROR")
SPAN_KEYS = ("spanId", "span_id", "spanContext", "context", "traceId", "trace_id", "attributes")


@register("otel", label="OpenTelemetry spans (OTLP JSON, GenAI or OpenInference attributes)")
def parse(path: Path) -> Iterator[ParseResult]:
    traces: dict[str, list[Span]] = {}
    locations: dict[str, str] = {}
    resources: dict[str, dict[str, Any]] = {}
    order = 0
    for entry in jsonstream.iter_records(path):
        if isinstance(entry, RecordError):
            yield entry
            continue
        location, record = entry
        try:
            found = list(_record_spans(record, path))
        except FieldError as error:
            yield RecordError(location, error.field, error.message)
            continue
        for trace_id, span, resource in found:
            span.order = order
            order += 1
            traces.setdefault(trace_id, []).append(span)
            locations.setdefault(trace_id, location)
            if resource:
                resources.setdefault(trace_id, resource)
    for trace_id, trace_spans in traces.items():
        yield trace_trajectory(
            trace_id, trace_spans, locations[trace_id], resources.get(trace_id, {})
        )


def _record_spans(record: Any, path: Path) -> Iterator[tuple[str, Span, dict[str, Any]]]:
    """(trace id, span, resource attributes) for each span in one record."""
    if not isinstance(record, dict):
        raise FieldError("", f"expected a span or an OTLP object, got {type(record).__name__}")
    if "resourceSpans" in record:
        resource_spans = _list(record, "resourceSpans", "")
        for r, resource_span in enumerate(resource_spans):
            where = f"resourceSpans.{r}"
            if not isinstance(resource_span, dict):
                raise FieldError(where, f"expected an object, got {type(resource_span).__name__}")
            resource = resource_span.get("resource")
            resource_attributes = (
                attributes(resource.get("attributes"), f"{where}.resource.attributes")
                if isinstance(resource, dict)
                else {}
            )
            key = "scopeSpans" if "scopeSpans" in resource_span else "instrumentationLibrarySpans"
            for s, scope_span in enumerate(_list(resource_span, key, where)):
                scope_where = f"{where}.{key}.{s}"
                if not isinstance(scope_span, dict):
                    raise FieldError(
                        scope_where, f"expected an object, got {type(scope_span).__name__}"
                    )
                for n, span in enumerate(_list(scope_span, "spans", scope_where)):
                    trace_id, parsed = span_record(span, f"{scope_where}.spans.{n}")
                    yield trace_id, parsed, resource_attributes
    elif any(key in record for key in SPAN_KEYS):
        trace_id, parsed = span_record(record, "")
        yield trace_id, parsed, {}
    else:
        # A bare attribute map: one span, its trace named after the file.
        span = _classify(path.stem, "", path.stem, record, "")
        span.raw = record
        yield path.stem, span, {}


def _list(record: dict[str, Any], key: str, where: str) -> list[Any]:
    value = record.get(key)
    name = f"{where}.{key}" if where else key
    if value is None:
        raise FieldError(name, "is missing")
    if not isinstance(value, list):
        raise FieldError(name, f"expected a list, got {type(value).__name__}")
    return value


def span_record(record: Any, where: str) -> tuple[str, Span]:
    """One span object (OTLP JSON, OpenTelemetry-JS or the console exporter's shape) as
    its trace id and :class:`Span`; the OTLP receiver's staged spans come through here too."""

    def name_of(key: str) -> str:
        return f"{where}.{key}" if where else key

    if not isinstance(record, dict):
        raise FieldError(where, f"expected a span object, got {type(record).__name__}")
    context = record.get("spanContext", record.get("context"))
    context = context if isinstance(context, dict) else {}
    trace_id = _id(record, ("traceId", "trace_id"), context, name_of("traceId"), required=True)
    span_id = _id(record, ("spanId", "span_id"), context, name_of("spanId"), required=True)
    parent_context = record.get("parentSpanContext")
    parent_id = _id(
        record,
        ("parentSpanId", "parent_span_id", "parent_id"),
        parent_context if isinstance(parent_context, dict) else {},
        name_of("parentSpanId"),
        required=False,
    )
    name = record.get("name")
    if not isinstance(name, str):
        raise FieldError(name_of("name"), "is missing" if name is None else "expected str")
    attrs = attributes(record.get("attributes"), name_of("attributes"))
    span = _classify(span_id, parent_id, name, attrs, where)
    span.start = _time(record, ("startTimeUnixNano", "startTime", "start_time"), where)
    span.end = _time(record, ("endTimeUnixNano", "endTime", "end_time"), where)
    span.error = span.error or _status_error(record, where)
    span.raw = record
    return trace_id, span


def _id(
    record: dict[str, Any],
    keys: tuple[str, ...],
    context: dict[str, Any],
    name: str,
    *,
    required: bool,
) -> str:
    """The first of ``keys`` in the span, else in its context object (which names the
    ids ``traceId`` / ``trace_id`` and ``spanId`` / ``span_id``)."""
    context_keys = ("traceId", "trace_id") if "traceId" in keys else ("spanId", "span_id")
    for source, names in ((record, keys), (context, context_keys)):
        for key in names:
            value = source.get(key)
            if value in (None, ""):
                continue
            if not isinstance(value, str):
                raise FieldError(name, f"expected str, got {type(value).__name__}")
            return value
    if required:
        raise FieldError(name, "is missing")
    return ""


def _time(record: dict[str, Any], keys: tuple[str, ...], where: str) -> float | None:
    for key in keys:
        if record.get(key) is not None:
            return spans.seconds(record[key], f"{where}.{key}" if where else key)
    return None


def _status_error(record: dict[str, Any], where: str) -> str:
    status = record.get("status")
    if isinstance(status, dict):
        code = status.get("code", status.get("status_code"))
        if code in ERROR_CODES:
            message = status.get("message", status.get("description"))
            return message if isinstance(message, str) and message else "error"
    events = record.get("events")
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("name") == "exception":
            found = attributes(event.get("attributes"), f"{where}.events")
            message = found.get("exception.message")
            if isinstance(message, str):
                return message
    return ""


def attributes(value: Any, where: str) -> dict[str, Any]:
    """Span attributes as a flat dict: OTLP's list of ``{key, value: {stringValue...}}``
    or an object as it is."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if not isinstance(value, list):
        raise FieldError(where, f"expected a list or an object, got {type(value).__name__}")
    found = {}
    for number, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise FieldError(f"{where}.{number}", "expected {key, value}")
        found[item["key"]] = _any_value(item.get("value"))
    return found


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as plain JSON."""
    if not isinstance(value, dict):
        return value
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return spans.count(value["intValue"])
    if "arrayValue" in value:
        items = value["arrayValue"].get("values") if isinstance(value["arrayValue"], dict) else []
        return [_any_value(item) for item in items or []]
    if "kvlistValue" in value:
        kvlist = value["kvlistValue"]
        items = kvlist.get("values") if isinstance(kvlist, dict) else []
        return {
            item["key"]: _any_value(item.get("value"))
            for item in items or []
            if isinstance(item, dict) and isinstance(item.get("key"), str)
        }
    return None


# Attributes to a span


def _classify(span_id: str, parent_id: str, name: str, attrs: dict[str, Any], where: str) -> Span:
    kind = _kind(name, attrs)
    span = Span(span_id=span_id, parent_span_id=parent_id, kind=kind, name=name, order=0)
    span.model = _first_text(
        attrs, "gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "ai.model.id"
    )
    span.agent = _first_text(attrs, "gen_ai.agent.name", "agent.name")
    if kind == "tool":
        span.input = _first(
            attrs, "input.value", "gen_ai.tool.call.arguments", "ai.toolCall.args", "input"
        )
        span.output = _first(
            attrs, "output.value", "gen_ai.tool.call.result", "ai.toolCall.result", "output"
        )
    else:
        span.input = _input_messages(attrs)
        span.output = _output_messages(attrs)
    if kind == "tool":
        span.tool_name = _first_text(attrs, "gen_ai.tool.name", "tool.name", "ai.toolCall.name")
        span.tool_args = decode(span.input)
        call_id = _first_text(attrs, "gen_ai.tool.call.id", "tool_call.id", "ai.toolCall.id")
        if call_id:
            span.extra["tool_call_id"] = call_id
    span.tokens = _tokens(attrs)
    cost = spans.money(_first(attrs, "llm.cost.total", "gen_ai.usage.cost"))
    span.cost = cost
    error_type = attrs.get("error.type")
    if isinstance(error_type, str) and error_type:
        span.error = error_type
    session = _first_text(attrs, "session.id", "gen_ai.conversation.id")
    if session:
        span.extra["session_id"] = session
    return span


def _kind(name: str, attrs: dict[str, Any]) -> str:
    openinference = attrs.get("openinference.span.kind")
    if isinstance(openinference, str) and openinference.upper() in OPENINFERENCE_KINDS:
        return OPENINFERENCE_KINDS[openinference.upper()]
    operation = attrs.get("gen_ai.operation.name")
    if isinstance(operation, str) and operation in GENAI_OPERATIONS:
        return GENAI_OPERATIONS[operation]
    operation_id = attrs.get("ai.operationId", name)
    if isinstance(operation_id, str) and operation_id.startswith("ai."):
        # The Vercel AI SDK: the provider call is doGenerate / doStream, tools are toolCall.
        if operation_id.endswith((".doGenerate", ".doStream")):
            return "llm"
        if operation_id == "ai.toolCall":
            return "tool"
        if operation_id.startswith("ai.embed"):
            return "embedding"
        return "chain"
    if any(key in attrs for key in ("gen_ai.request.model", "llm.model_name")):
        return "llm"
    if any(key in attrs for key in ("gen_ai.tool.name", "tool.name")):
        return "tool"
    if any(key in attrs for key in ("gen_ai.agent.name", "agent.name")):
        return "agent"
    return "span"


def _input_messages(attrs: dict[str, Any]) -> Any:
    flattened = unflatten(attrs, "llm.input_messages.")
    if flattened:
        return [_openinference_message(message) for message in flattened]
    for key in ("gen_ai.input.messages", "ai.prompt.messages", "input.value", "ai.prompt"):
        if attrs.get(key) is not None:
            return decode(attrs[key])
    prompts = unflatten(attrs, "gen_ai.prompt.")
    if prompts:
        return prompts
    return decode(attrs.get("input"))


def _output_messages(attrs: dict[str, Any]) -> Any:
    flattened = unflatten(attrs, "llm.output_messages.")
    if flattened:
        return [_openinference_message(message) for message in flattened]
    if attrs.get("gen_ai.output.messages") is not None:
        return decode(attrs["gen_ai.output.messages"])
    if attrs.get("ai.response.text") is not None or attrs.get("ai.response.toolCalls"):
        text = attrs.get("ai.response.text")
        calls = decode(attrs.get("ai.response.toolCalls")) or []
        calls = calls if isinstance(calls, list) else []
        return [{"type": "text", "text": text if isinstance(text, str) else ""}] + [
            {
                **call,
                "type": "tool_call",
                "name": call.get("toolName"),
                "arguments": call.get("args"),
            }
            for call in calls
            if isinstance(call, dict)
        ]
    if attrs.get("ai.response.object") is not None:
        # Kept as text: decoded, the object would be read as a message with no text.
        return [{"type": "text", "text": str(attrs["ai.response.object"])}]
    completions = unflatten(attrs, "gen_ai.completion.")
    if completions:
        return completions
    for key in ("output.value", "output"):
        if attrs.get(key) is not None:
            return decode(attrs[key])
    return None


def _openinference_message(value: Any) -> Any:
    """An OpenInference message (``{"message": {"role", "content" | "contents",
    "tool_calls"}}`` once unflattened) as an OpenAI-style message."""
    message = value.get("message", value) if isinstance(value, dict) else value
    if not isinstance(message, dict):
        return message
    parts = []
    contents = message.get("contents")
    for content in contents if isinstance(contents, list) else []:
        part = content.get("message_content") if isinstance(content, dict) else None
        if isinstance(part, dict):
            parts.append(part)
    if isinstance(message.get("content"), str):
        parts.insert(0, {"type": "text", "text": message["content"]})
    calls = []
    tool_calls = message.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else []:
        inner = call.get("tool_call") if isinstance(call, dict) else None
        if isinstance(inner, dict):
            calls.append(inner)
    converted: dict[str, Any] = {"role": message.get("role"), "content": parts}
    if calls:
        converted["tool_calls"] = calls
    return converted


def unflatten(attrs: dict[str, Any], prefix: str) -> list[Any]:
    """Flattened attributes under ``prefix`` (``prefix.0.message.role = "user"``) as the
    list they flatten: numbered keys become list items, in number order."""
    tree: dict[str, Any] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        node = tree
        segments = key[len(prefix) :].split(".")
        for segment in segments[:-1]:
            child = node.get(segment)
            if not isinstance(child, dict):
                child = node[segment] = {}
            node = child
        node[segments[-1]] = value
    return _as_lists(tree) if tree else []


def _as_lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {key: _as_lists(value) for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def _tokens(attrs: dict[str, Any]) -> dict[str, int]:
    names = {
        "input": (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
            "ai.usage.inputTokens",
            "ai.usage.promptTokens",
        ),
        "output": (
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
            "ai.usage.outputTokens",
            "ai.usage.completionTokens",
        ),
        "total": ("llm.token_count.total", "gen_ai.usage.total_tokens", "ai.usage.totalTokens"),
    }
    tokens = {}
    for name, keys in names.items():
        for key in keys:
            value = spans.count(attrs.get(key))
            if value is not None:
                tokens[name] = value
                break
    return tokens


def _first(attrs: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if attrs.get(key) is not None:
            return attrs[key]
    return None


def _first_text(attrs: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def trace_trajectory(
    trace_id: str, trace_spans: list[Span], location: str, resource: dict[str, Any]
) -> ParsedTrajectory:
    """The trajectory of one trace's spans: the file importer's and the OTLP receiver's."""
    tree = spans.build(trace_spans)
    sessions = [span.extra["session_id"] for span in trace_spans if "session_id" in span.extra]
    return ParsedTrajectory(
        external_id=trace_id,
        task=tree.task,
        steps=tree.steps,
        model_name=tree.model,
        metadata=trace_metadata(trace_id, tree.totals, sessions[0] if sessions else None, resource),
        raw=[span.raw for span in trace_spans],
        location=location,
    )


def trace_metadata(
    trace_id: str, totals: dict[str, Any], session_id: Any, resource: dict[str, Any]
) -> dict[str, Any]:
    """A trace's trajectory metadata: its id, totals, the session of its first span that
    names one (in the order the spans came), and the service of its resource."""
    metadata: dict[str, Any] = {"trace_id": trace_id, **totals}
    if session_id is not None:
        metadata["session_id"] = session_id
    service = resource.get("service.name")
    if isinstance(service, str):
        metadata["service_name"] = service
    return metadata
