"""Request-level guards that every page and API call passes: a Content-Security-Policy that
lets only our own scripts run, a refusal of request bodies over the upload limit before
any of the body is read, a clear 503 when a job cannot be queued, and a 400 for a value
from the request that the database refuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views.defaults import bad_request
from rest_framework.response import Response
from rest_framework.views import exception_handler

from stepscope.queueing import QueueUnavailable

# Scripts only from our own origin (htmx and labeling.js are served locally) and never
# inline or eval'd; inline style attributes carry per-step colours, so styles may be
# inline. Nothing may frame the app, and forms post only to it.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


DATABASE_UNAVAILABLE = (
    "The database is unavailable right now, so nothing of this request was saved."
    " Try again in a moment."
)


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, QueueUnavailable):
            return service_unavailable(request, str(exception))
        if isinstance(exception, OperationalError | InterfaceError):
            # The database went away (a restart, a failover): the request's transaction
            # was rolled back, so say that nothing of it was saved.
            return service_unavailable(request, DATABASE_UNAVAILABLE)
        if isinstance(exception, DataError):
            # A value from the request that PostgreSQL cannot hold or compare (a NUL byte
            # in ?task=, a queue id beyond bigint): a bad request, not a server error.
            return bad_request(request, exception)
        return None


def service_unavailable(request: HttpRequest, message: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=503)
    # No request: context processors would load the session, maybe from a dead database.
    body = render_to_string("503.html", {"message": message})
    return HttpResponse(body, status=503)


def api_exception_handler(exception: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus a 503 with the reason when a job cannot be queued."""
    if isinstance(exception, QueueUnavailable):
        return Response({"detail": str(exception)}, status=503)
    if isinstance(exception, OperationalError | InterfaceError):
        return Response({"detail": DATABASE_UNAVAILABLE}, status=503)
    if isinstance(exception, DataError):
        # A value from the request that PostgreSQL cannot hold or compare (a NUL byte in
        # a filter, a number beyond the column's range): the client's error, not ours.
        return Response({"detail": f"A value in the request was refused: {exception}"}, status=400)
    return exception_handler(exception, context)


class UploadLimitMiddleware:
    """Answer 413 to a request whose declared body is larger than the upload limit, with
    a message that says the limit and the way around it, without reading the body.
    (Django's WSGI request reads no body at all without a Content-Length.)"""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.STEPSCOPE_UPLOAD_MAX_BYTES
        # The OTLP receiver has its own limit and answers in OTLP's form.
        if length > limit and request.path != "/v1/traces":
            return upload_too_large(request, length)
        return self.get_response(request)


def upload_too_large(request: HttpRequest, length: int | None) -> HttpResponse:
    limit = settings.STEPSCOPE_UPLOAD_MAX_BYTES
    size = f"{length / 1e6:.1f} MB" if length else "larger than the limit"
    message = (
        f"The upload is {size}; the limit is {limit / 1e6:.1f} MB"
        " (STEPSCOPE_UPLOAD_MAX_BYTES). Import larger files with"
        " `python manage.py import_trajectories`."
    )
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=413)
    body = render_to_string("413.html", {"message": message}, request=request)
    return HttpResponse(body, status=413)
