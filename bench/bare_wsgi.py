"""The bare baseline of ``bench/push.py``: a WSGI app that reads a request's body and
answers 201, under the same gunicorn as Stepscope. What a push costs it is the client's
encoding, the transfer and the server's request handling, with nothing stored."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    environ["wsgi.input"].read(length)
    start_response("201 Created", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]
