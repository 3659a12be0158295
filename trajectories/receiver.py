"""The OTLP/HTTP trace receiver: ``POST /v1/traces``, where an OpenTelemetry SDK pointed
at Stepscope (``OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST:8000``) sends its spans.

It answers as the OTLP specification says, in the request's own encoding (protobuf or
JSON): an ``ExportTraceServiceResponse`` on success (its ``partialSuccess`` naming the
spans it could not keep), else a ``google.rpc.Status`` with a message saying what was
wrong. 429 and 503 carry ``Retry-After``, which the SDK exporters honour by retrying.
Authentication is an API token (``Authorization: Bearer <token>`` or ``Token <token>``);
the project is the ``x-stepscope-project`` header, else the ``stepscope.project``
resource attribute. The request stages the spans and returns; the assembler builds the
trajectories (``trajectories.services.live`` stages, ``.assembly`` builds).
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from accounts.authentication import ApiTokenAuthentication
from trajectories.formats import otlp
from trajectories.models import Membership, Project
from trajectories.selectors import MANAGING_ROLES
from trajectories.services.live import backlog, live_spans_accept, live_sweep

logger = logging.getLogger(__name__)

PROJECT_HEADER = "HTTP_X_STEPSCOPE_PROJECT"
# google.rpc.Code of each answer that is not a success.
CODES = {400: 3, 401: 16, 403: 7, 404: 5, 405: 12, 413: 8, 415: 3, 429: 8, 503: 14}
# Seconds an exporter is asked to wait before retrying a shed request.
RETRY_AFTER = 2
# How often one process looks at the backlog (for 429) and for pending traces nobody is
# assembling (the sweep that replaces a lost assembly task).
CHECK_EVERY = 1.0
SWEEP_EVERY = 10.0


class Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class _Checks:
    """The per-process memory of the last backlog look and sweep."""

    backlog_at = 0.0
    backlog = 0
    swept_at = 0.0


@csrf_exempt  # token authentication only: no cookie, so no cross-site request to forge
def traces_receive(request: HttpRequest) -> HttpResponse:
    content_type = (request.content_type or "").lower()
    answer_type = otlp.PROTOBUF if content_type == otlp.PROTOBUF else otlp.JSON
    try:
        try:
            user = _user(request)
            if request.method != "POST":
                raise Refused(405, "POST an ExportTraceServiceRequest to /v1/traces")
            if content_type not in (otlp.PROTOBUF, otlp.JSON):
                raise Refused(
                    415,
                    f"Content-Type {content_type or '(none)'!r} is not accepted: send"
                    f" {otlp.PROTOBUF} or {otlp.JSON}",
                )
            body = _body(request)
            decoded = _decoded(body, content_type)
            project = _project(request, user, decoded)
            _shed_if_behind()
            accepted = live_spans_accept(project_id=project.pk, spans=decoded.spans)
        except (OperationalError, InterfaceError) as error:
            close_old_connections()
            logger.warning("OTLP request refused, the database is unavailable: %s", error)
            raise Refused(
                503, "The database is unavailable; retry later.", retry_after=RETRY_AFTER
            ) from None
    except Refused as refused:
        response = HttpResponse(
            otlp.status_body(answer_type, CODES.get(refused.status, 2), refused.message),
            status=refused.status,
            content_type=answer_type,
        )
        if refused.retry_after is not None:
            response["Retry-After"] = str(refused.retry_after)
        if refused.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="stepscope"'
        return response
    rejected = decoded.rejected + accepted.rejected
    return HttpResponse(
        otlp.response_body(answer_type, rejected), status=200, content_type=answer_type
    )


class _Header:
    """What DRF's authentication classes read of a request: its headers."""

    def __init__(self, key: str) -> None:
        self.META = {"HTTP_AUTHORIZATION": f"Token {key}"}
        self.headers = {"authorization": f"Token {key}"}


def _user(request: HttpRequest) -> Any:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    parts = header.split()
    if not parts:
        raise Refused(
            401,
            "Authentication is missing: send an API token as 'Authorization: Bearer <token>'"
            " (OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>)",
        )
    if len(parts) != 2 or parts[0].lower() not in ("bearer", "token"):
        raise Refused(401, "The Authorization header must be 'Bearer <token>' or 'Token <token>'")
    shim: Any = _Header(parts[1])
    try:
        for authentication in (ApiTokenAuthentication(), TokenAuthentication()):
            found = authentication.authenticate(shim)
            if found is not None:
                return found[0]
    except AuthenticationFailed as failed:
        raise Refused(401, str(failed.detail)) from None
    raise Refused(401, "Invalid token in the Authorization header")


def _body(request: HttpRequest) -> bytes:
    limit = settings.STEPSCOPE_OTLP_MAX_BODY
    too_large = (
        f"The body is larger than {limit} bytes (STEPSCOPE_OTLP_MAX_BODY); export in smaller"
        " batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)"
    )
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    if length > limit:
        raise Refused(413, too_large)
    raw = request.read(limit + 1)
    if len(raw) > limit:
        raise Refused(413, too_large)
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise Refused(415, f"Content-Encoding {encoding!r} is not accepted: send gzip or none")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflater.decompress(raw, limit + 1)
    except zlib.error as error:
        raise Refused(400, f"The body is not valid gzip: {error}") from None
    if len(body) > limit or inflater.unconsumed_tail:
        raise Refused(413, too_large + " (after gzip decompression)")
    return body


def _decoded(body: bytes, content_type: str) -> otlp.Decoded:
    cap = settings.STEPSCOPE_OTLP_MAX_ATTRIBUTE
    try:
        if content_type == otlp.PROTOBUF:
            return otlp.decode_protobuf(body, max_attribute=cap)
        return otlp.decode_json(body, max_attribute=cap)
    except otlp.WireError as error:
        raise Refused(400, str(error)) from None


def _project(request: HttpRequest, user: Any, decoded: otlp.Decoded) -> Project:
    slug = request.META.get(PROJECT_HEADER, "").strip() or decoded.project
    if not slug:
        raise Refused(
            400,
            "No project named: send the x-stepscope-project header or set the"
            " stepscope.project resource attribute (OTEL_RESOURCE_ATTRIBUTES)",
        )
    role = (
        Membership.objects.filter(
            user_id=user.pk, project__slug=slug, project__deleting_since__isnull=True
        )
        .values_list("role", "project_id")
        .first()
    )
    if role is None:
        raise Refused(404, f"No project {slug!r} that this token's user is a member of")
    if role[0] not in MANAGING_ROLES:
        raise Refused(403, f"Only researchers and admins of {slug!r} send traces to it")
    return Project(pk=role[1], slug=slug)


def _shed_if_behind() -> None:
    now = time.monotonic()
    if now - _Checks.backlog_at > CHECK_EVERY:
        _Checks.backlog_at = now
        _Checks.backlog = backlog()
    if now - _Checks.swept_at > SWEEP_EVERY:
        _Checks.swept_at = now
        try:
            live_sweep()
        except DatabaseError as error:  # the sweep is a safety net, never the request's failure
            logger.warning("live trace sweep failed: %s", error)
    if _Checks.backlog > settings.STEPSCOPE_OTLP_MAX_BACKLOG:
        raise Refused(
            429,
            f"{_Checks.backlog} spans are waiting to be assembled (more than"
            f" STEPSCOPE_OTLP_MAX_BACKLOG={settings.STEPSCOPE_OTLP_MAX_BACKLOG}); retry later",
            retry_after=RETRY_AFTER,
        )
