"""OTLP export bodies for the receiver's tests and the benchmark: an agent trace of six
OpenInference spans (agent root, two model calls, two tool calls of which one fails, a
final model call), as JSON the way the specification writes it and as protobuf."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

START = 1_760_000_000_000_000_000


def trace_id(n: int) -> str:
    return f"{n + 1:032x}"


def span_id(trace: int, n: int) -> str:
    return f"{trace + 1:08x}{n + 1:08x}"


def agent_spans(trace: int, *, question: str = "What is 6 x 7?") -> list[dict[str, Any]]:
    """Six spans of one agent run, each as (id, parent, name, attributes, error)."""
    t = trace_id(trace)
    root = span_id(trace, 0)
    messages = {
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": question,
    }

    def llm(n: int, text: str, call: str = "") -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-test",
            **messages,
            "llm.output_messages.0.message.role": "assistant",
            "llm.token_count.prompt": 12,
            "llm.token_count.completion": 5,
        }
        if text:
            attributes["llm.output_messages.0.message.content"] = text
        if call:
            prefix = "llm.output_messages.0.message.tool_calls.0.tool_call."
            attributes[prefix + "id"] = f"call_{n}"
            attributes[prefix + "function.name"] = call
            attributes[prefix + "function.arguments"] = json.dumps({"expression": "6*7"})
        return {"n": n, "parent": root, "name": "ChatCompletion", "attributes": attributes}

    def tool(n: int, output: str, error: str = "") -> dict[str, Any]:
        return {
            "n": n,
            "parent": root,
            "name": "calculator",
            "attributes": {
                "openinference.span.kind": "TOOL",
                "tool.name": "calculator",
                "input.value": json.dumps({"expression": "6*7"}),
                "output.value": output,
            },
            "error": error,
        }

    spans = [
        {
            "n": 0,
            "parent": "",
            "name": "agent",
            "attributes": {
                "openinference.span.kind": "AGENT",
                "input.value": question,
                "output.value": "42",
            },
        },
        llm(1, "", "calculator"),
        tool(2, "", "ZeroDivisionError: division by zero"),
        llm(3, "", "calculator"),
        tool(4, "42"),
        llm(5, "The answer is 42."),
    ]
    for span in spans:
        span["trace_id"] = t
        span["span_id"] = span_id(trace, span["n"])
    return spans


def _json_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def json_body(
    spans: list[dict[str, Any]], *, project: str = "", service: str = "agent-service"
) -> bytes:
    resource = [{"key": "service.name", "value": {"stringValue": service}}]
    if project:
        resource.append({"key": "stepscope.project", "value": {"stringValue": project}})
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": resource},
                    "scopeSpans": [
                        {
                            "scope": {"name": "openinference.instrumentation.openai"},
                            "spans": [_json_span(span) for span in spans],
                        }
                    ],
                }
            ]
        }
    ).encode()


def _json_span(span: dict[str, Any]) -> dict[str, Any]:
    start = START + span["n"] * 1_000_000
    out: dict[str, Any] = {
        "traceId": span["trace_id"],
        "spanId": span["span_id"],
        "parentSpanId": span["parent"],
        "name": span["name"],
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 500_000),
        "attributes": [
            {"key": key, "value": _json_value(value)} for key, value in span["attributes"].items()
        ],
    }
    if span.get("error"):
        out["status"] = {"code": 2, "message": span["error"]}
    return out


def protobuf_body(
    spans: list[dict[str, Any]], *, project: str = "", service: str = "agent-service"
) -> bytes:
    resource = Resource(attributes=[_kv("service.name", service)])
    if project:
        resource.attributes.append(_kv("stepscope.project", project))
    pb_spans = []
    for span in spans:
        start = START + span["n"] * 1_000_000
        pb = Span(
            trace_id=bytes.fromhex(span["trace_id"]),
            span_id=bytes.fromhex(span["span_id"]),
            parent_span_id=bytes.fromhex(span["parent"]),
            name=span["name"],
            kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start,
            end_time_unix_nano=start + 500_000,
            attributes=[_kv(key, value) for key, value in span["attributes"].items()],
        )
        if span.get("error"):
            pb.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=span["error"]))
        pb_spans.append(pb)
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=pb_spans)])]
    )
    return request.SerializeToString()


def _kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        any_value = AnyValue(bool_value=value)
    elif isinstance(value, int):
        any_value = AnyValue(int_value=value)
    elif isinstance(value, float):
        any_value = AnyValue(double_value=value)
    else:
        any_value = AnyValue(string_value=value)
    return KeyValue(key=key, value=any_value)
