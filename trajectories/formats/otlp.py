"""OTLP/HTTP trace export bodies (``ExportTraceServiceRequest``, protobuf or JSON) as span
records, and the answers the receiver sends back.

This module reads the wire format only: each span comes out as a record in OTLP JSON's
shape (hex ids, ``startTimeUnixNano``...), with its attributes as a flat object and its
resource's attributes under ``resource``. The receiver stages those records as they are,
and the assembler reads them through :func:`trajectories.formats.otel.span_record`, the
same mapping the ``otel`` file importer uses, so there is one span-to-step parser.

A body that cannot be read at all is a :class:`WireError` (a 400); a span that can be
read but not kept (bad ids, no name) is rejected alone, named in the answer's
``partialSuccess``. Text longer than the attribute cap is cut, with a marker saying how
long it was, never silently.
"""

# Django-free: it parses request bodies, the receiver view does the rest.
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from trajectories.formats import otel
from trajectories.formats.base import FieldError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
PROJECT_ATTRIBUTE = "stepscope.project"
# google.rpc.Code values the OTLP specification has receivers answer with.
INVALID_ARGUMENT = 3


class WireError(ValueError):
    """The body as a whole cannot be read: the receiver answers 400 with this message."""


@dataclass(slots=True)
class WireSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    # The span in OTLP JSON's shape, attributes flat, resource attributes under "resource".
    record: dict[str, Any]


@dataclass
class Decoded:
    spans: list[WireSpan] = field(default_factory=list)
    # "span <id> of trace <id>: why" for each span that cannot be kept.
    rejected: list[str] = field(default_factory=list)
    # The stepscope.project resource attribute, where the resources name one.
    project: str = ""
    # How many attribute values were cut to the cap.
    cut: int = 0


def cut_text(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters, with a marker naming its full length."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]} [cut by Stepscope: {len(value)} characters, the first {limit} kept]"


class _Reader:
    def __init__(self, max_attribute: int) -> None:
        self.max_attribute = max_attribute
        self.decoded = Decoded()

    def text(self, value: str) -> str:
        if len(value) > self.max_attribute:
            self.decoded.cut += 1
            return cut_text(value, self.max_attribute)
        return value

    def project(self, resource: dict[str, Any], where: str) -> None:
        named = resource.get(PROJECT_ATTRIBUTE)
        if not isinstance(named, str) or not named:
            return
        if self.decoded.project and named != self.decoded.project:
            raise WireError(
                f"{where}.resource names project {named!r}, an earlier resource"
                f" {self.decoded.project!r}: send one project's spans per request"
            )
        self.decoded.project = named

    def keep(
        self, trace_id: str, span_id: str, parent_id: str, name: Any, record: dict[str, Any]
    ) -> None:
        problem = ""
        if len(trace_id) != 32 or trace_id == "0" * 32 or not _is_hex(trace_id):
            problem = "traceId must be 16 bytes (32 hex digits), not all zero"
        elif len(span_id) != 16 or span_id == "0" * 16 or not _is_hex(span_id):
            problem = "spanId must be 8 bytes (16 hex digits), not all zero"
        elif parent_id and (len(parent_id) != 16 or not _is_hex(parent_id)):
            problem = "parentSpanId must be 8 bytes (16 hex digits) or empty"
        elif not isinstance(name, str):
            problem = "name is missing"
        if problem:
            self.decoded.rejected.append(
                f"span {span_id or '?'} of trace {trace_id or '?'}: {problem}"
            )
            return
        self.decoded.spans.append(WireSpan(trace_id, span_id, parent_id, record))


def _is_hex(value: str) -> bool:
    try:
        int(value, 16)
    except ValueError:
        return False
    return True


# Protobuf


def decode_protobuf(body: bytes, *, max_attribute: int) -> Decoded:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as error:
        raise WireError(
            f"the body is not an ExportTraceServiceRequest in protobuf: {error}"
        ) from None
    reader = _Reader(max_attribute)
    for r, resource_spans in enumerate(request.resource_spans):
        resource = _pb_attributes(resource_spans.resource.attributes, reader)
        reader.project(resource, f"resourceSpans.{r}")
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                trace_id = span.trace_id.hex()
                span_id = span.span_id.hex()
                parent_id = span.parent_span_id.hex()
                record: dict[str, Any] = {
                    "traceId": trace_id,
                    "spanId": span_id,
                    "parentSpanId": parent_id,
                    "name": reader.text(span.name),
                    "kind": span.kind,
                    "startTimeUnixNano": span.start_time_unix_nano,
                    "endTimeUnixNano": span.end_time_unix_nano,
                    "attributes": _pb_attributes(span.attributes, reader),
                }
                if span.status.code:
                    record["status"] = {
                        "code": span.status.code,
                        "message": reader.text(span.status.message),
                    }
                if span.events:
                    record["events"] = [
                        {
                            "name": event.name,
                            "timeUnixNano": event.time_unix_nano,
                            "attributes": _pb_attributes(event.attributes, reader),
                        }
                        for event in span.events
                    ]
                if scope:
                    record["scope"] = scope
                if resource:
                    record["resource"] = resource
                reader.keep(trace_id, span_id, parent_id, record["name"], record)
    return reader.decoded


def _pb_attributes(values: Any, reader: _Reader) -> dict[str, Any]:
    return {item.key: _pb_value(item.value, reader) for item in values}


def _pb_value(value: Any, reader: _Reader) -> Any:
    which = value.WhichOneof("value")
    if which == "string_value":
        return reader.text(value.string_value)
    if which == "int_value" or which == "bool_value" or which == "double_value":
        return getattr(value, which)
    if which == "array_value":
        return [_pb_value(item, reader) for item in value.array_value.values]
    if which == "kvlist_value":
        return {item.key: _pb_value(item.value, reader) for item in value.kvlist_value.values}
    if which == "bytes_value":
        return reader.text(base64.b64encode(value.bytes_value).decode())
    return None


# JSON


def decode_json(body: bytes, *, max_attribute: int) -> Decoded:
    """OTLP JSON as the specification writes it: hex ids, camelCase names, 64-bit
    integers as strings or numbers, enums as numbers."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise WireError(f"the body is not JSON: {error}") from None
    if not isinstance(request, dict):
        raise WireError(f"expected an ExportTraceServiceRequest object, got {_kind(request)}")
    resource_spans_list = request.get("resourceSpans", [])
    if not isinstance(resource_spans_list, list):
        raise WireError(f"resourceSpans: expected a list, got {_kind(resource_spans_list)}")
    reader = _Reader(max_attribute)
    for r, resource_spans in enumerate(resource_spans_list):
        where = f"resourceSpans.{r}"
        if not isinstance(resource_spans, dict):
            raise WireError(f"{where}: expected an object, got {_kind(resource_spans)}")
        resource_object = resource_spans.get("resource") or {}
        resource = _json_attributes(
            resource_object.get("attributes") if isinstance(resource_object, dict) else None,
            f"{where}.resource.attributes",
            reader,
        )
        reader.project(resource, where)
        scope_list = resource_spans.get("scopeSpans", [])
        if not isinstance(scope_list, list):
            raise WireError(f"{where}.scopeSpans: expected a list, got {_kind(scope_list)}")
        for s, scope_spans in enumerate(scope_list):
            scope_where = f"{where}.scopeSpans.{s}"
            if not isinstance(scope_spans, dict):
                raise WireError(f"{scope_where}: expected an object, got {_kind(scope_spans)}")
            scope = scope_spans.get("scope")
            scope_name = scope.get("name") if isinstance(scope, dict) else None
            span_list = scope_spans.get("spans", [])
            if not isinstance(span_list, list):
                raise WireError(f"{scope_where}.spans: expected a list, got {_kind(span_list)}")
            for n, span in enumerate(span_list):
                span_where = f"{scope_where}.spans.{n}"
                if not isinstance(span, dict):
                    raise WireError(f"{span_where}: expected a span object, got {_kind(span)}")
                _json_span(span, span_where, resource, scope_name, reader)
    return reader.decoded


def _json_span(
    span: dict[str, Any],
    where: str,
    resource: dict[str, Any],
    scope: Any,
    reader: _Reader,
) -> None:
    trace_id = _json_id(span.get("traceId"))
    span_id = _json_id(span.get("spanId"))
    parent_id = _json_id(span.get("parentSpanId"))
    name = span.get("name")
    try:
        record: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": span_id,
            "parentSpanId": parent_id,
            "name": reader.text(name) if isinstance(name, str) else name,
            "kind": span.get("kind", 0),
            "attributes": _json_attributes(span.get("attributes"), f"{where}.attributes", reader),
        }
        for key in ("startTimeUnixNano", "endTimeUnixNano"):
            if span.get(key) is not None:
                record[key] = _nanos(span[key], f"{where}.{key}")
        status = span.get("status")
        if isinstance(status, dict) and status.get("code") not in (None, 0, "0"):
            message = status.get("message")
            record["status"] = {
                "code": status["code"],
                "message": reader.text(message) if isinstance(message, str) else "",
            }
        events = span.get("events")
        if isinstance(events, list) and events:
            record["events"] = [
                {
                    "name": event.get("name"),
                    "timeUnixNano": event.get("timeUnixNano"),
                    "attributes": _json_attributes(
                        event.get("attributes"), f"{where}.events.{e}.attributes", reader
                    ),
                }
                for e, event in enumerate(events)
                if isinstance(event, dict)
            ]
    except FieldError as error:
        reader.decoded.rejected.append(
            f"span {span_id or '?'} of trace {trace_id or '?'}: {error.field} {error.message}"
        )
        return
    if isinstance(scope, str) and scope:
        record["scope"] = scope
    if resource:
        record["resource"] = resource
    reader.keep(trace_id, span_id, parent_id, record["name"], record)


def _json_id(value: Any) -> str:
    """An id as OTLP JSON writes it (hex); lower case, as protobuf's bytes are written."""
    return value.lower() if isinstance(value, str) else ""


def _nanos(value: Any, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise FieldError(
        name, f"expected nanoseconds as an integer or a string of digits, got {value!r}"
    )


def _json_attributes(value: Any, where: str, reader: _Reader) -> dict[str, Any]:
    try:
        found = otel.attributes(value, where)
    except FieldError as error:
        raise FieldError(error.field, error.message) from None
    return {key: _capped(item, reader) for key, item in found.items()}


def _capped(value: Any, reader: _Reader) -> Any:
    if isinstance(value, str):
        return reader.text(value)
    if isinstance(value, list):
        return [_capped(item, reader) for item in value]
    if isinstance(value, dict):
        return {key: _capped(item, reader) for key, item in value.items()}
    return value


def _kind(value: Any) -> str:
    return type(value).__name__


# Answers


def response_body(content_type: str, rejected: list[str], *, message_limit: int = 2000) -> bytes:
    """An ``ExportTraceServiceResponse``: empty when every span was kept, else
    ``partialSuccess`` with the count and the reasons (the first few, then how many more)."""
    if not rejected:
        return b"{}" if content_type == JSON else b""
    shown = "; ".join(rejected[:20])
    if len(rejected) > 20:
        shown += f"; and {len(rejected) - 20} more"
    shown = shown[:message_limit]
    if content_type == JSON:
        return orjson.dumps(
            {"partialSuccess": {"rejectedSpans": str(len(rejected)), "errorMessage": shown}}
        )
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(rejected_spans=len(rejected), error_message=shown)
    ).SerializeToString()


def status_body(content_type: str, code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (code and message), the body OTLP gives failed requests."""
    if content_type == PROTOBUF:
        encoded = message.encode()
        return b"\x08" + _varint(code) + b"\x12" + _varint(len(encoded)) + encoded
    return orjson.dumps({"code": code, "message": message})


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_decode(body: bytes) -> tuple[int, str]:
    """The code and message of a protobuf ``google.rpc.Status`` (tests read answers)."""
    code, message, position = 0, "", 0
    while position < len(body):
        tag = body[position]
        position += 1
        value, position = _read_varint(body, position)
        if tag == 0x08:
            code = value
        elif tag == 0x12:
            message = body[position : position + value].decode()
            position += value
        else:
            raise binascii.Error(f"unexpected field tag {tag} in a Status")
    return code, message


def _read_varint(body: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = body[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position
