"""A webhook receiver as users run one: a small HTTP server on loopback that keeps what it
was sent, answers with the code it is told, and can be down (nothing listening) or hold a
request until the test lets it go."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, Project


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """Records every POST (headers lower-cased, raw body) and answers ``code``."""

    port: int
    code: int = 204
    received: list[Received] = field(default_factory=list)
    # Set: the next request waits in the handler until ``release`` is set.
    hold: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if receiver.hold.is_set():
                    receiver.hold.clear()
                    receiver.held.set()
                    receiver.release.wait(60)
                receiver.received.append(
                    Received({k.lower(): v for k, v in self.headers.items()}, body)
                )
                self.send_response(receiver.code)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        # ``stop()`` waits for the loop to see the shutdown, up to one poll interval (half a
        # second by default, at the end of every test that has a receiver).
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.server = server

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver that is up."""
    found = Receiver(free_port())
    found.start()
    yield found
    found.release.set()
    found.stop()


@pytest.fixture
def down_receiver() -> Iterator[Receiver]:
    """A receiver whose port nobody listens on until the test calls ``start()``."""
    found = Receiver(free_port())
    yield found
    found.release.set()
    found.stop()


@pytest.fixture
def researcher(project: Project) -> User:
    user = UserFactory.create(username="researcher")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    return user


@pytest.fixture
def allow_loopback(settings: Any) -> None:
    """Webhooks on loopback, as the workers the tests start allow (tests/conftest.py)."""
    settings.STEPSCOPE_WEBHOOK_ALLOW_PRIVATE = True
