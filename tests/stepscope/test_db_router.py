"""Where reads go when a replica is configured (stepscope/db_router.py), decided per
request: the router and the middleware on their own, with no replica behind them
(tests/stepscope/test_replica.py runs them against a real one)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from stepscope import db_router
from stepscope.db_router import PIN_COOKIE, ReplicaReadsMiddleware, ReplicaRouter
from stepscope.env import ConfigError, env_database_replica
from trajectories.models import Project, Step

PRIMARY = {"NAME": "stepscope", "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True}


def _answer(request: HttpRequest, *, write: bool = False) -> tuple[list[str], HttpResponse]:
    """The aliases a view's reads would use (before and after an optional write), and
    the middleware's response."""
    seen: list[str] = []
    router = ReplicaRouter()

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(router.db_for_read(Step))
        if write:
            assert router.db_for_write(Project) == "default"
            seen.append(router.db_for_read(Step))
        return HttpResponse("ok")

    response = ReplicaReadsMiddleware(view)(request)
    return seen, response


def _pinned_cookie(until: float) -> str:
    response = HttpResponse()
    db_router.pin(response, now=until - db_router.pin_seconds())
    return response.cookies[PIN_COOKIE].value


def test_outside_a_request_reads_and_writes_go_to_the_primary() -> None:
    router = ReplicaRouter()
    assert router.db_for_read(Step) == "default"
    assert router.db_for_write(Step) == "default"
    assert db_router.read_alias() == "default"


def test_migrations_run_on_the_primary_only() -> None:
    router = ReplicaRouter()
    assert router.allow_migrate("default", "trajectories")
    assert not router.allow_migrate("replica", "trajectories")


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_a_safe_request_reads_the_replica_and_pins_nobody(method: str) -> None:
    seen, response = _answer(RequestFactory().generic(method, "/p/demo/"))
    assert seen == ["replica"]
    assert PIN_COOKIE not in response.cookies
    # The request's routing ends with it.
    assert db_router.read_alias() == "default"


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT", "DELETE"])
def test_an_unsafe_request_reads_the_primary_and_pins_its_client(method: str) -> None:
    before = time.time()
    seen, response = _answer(RequestFactory().generic(method, "/api/v1/projects/demo/"))
    assert seen == ["default"]
    cookie = response.cookies[PIN_COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Lax"
    again = RequestFactory().get("/p/demo/")
    again.COOKIES[PIN_COOKIE] = cookie.value
    until = db_router.pinned_until(again)
    assert until is not None
    # Kept to the millisecond.
    window = db_router.pin_seconds()
    assert before + window - 0.001 <= until <= time.time() + window + 0.001


def test_a_pinned_client_reads_the_primary_until_its_window_ends() -> None:
    factory = RequestFactory()
    pinned = factory.get("/p/demo/")
    pinned.COOKIES[PIN_COOKIE] = _pinned_cookie(time.time() + 5)
    assert _answer(pinned)[0] == ["default"]
    ended = factory.get("/p/demo/")
    ended.COOKIES[PIN_COOKIE] = _pinned_cookie(time.time() - 0.01)
    assert _answer(ended)[0] == ["replica"]


@pytest.mark.parametrize("value", ["9999999999", "9999999999.0:forged", "not-a-time"])
def test_a_forged_pin_is_ignored(value: str) -> None:
    request = RequestFactory().get("/p/demo/")
    request.COOKIES[PIN_COOKIE] = value
    assert _answer(request)[0] == ["replica"]


def test_a_safe_request_that_writes_reads_the_primary_after_and_pins_its_client() -> None:
    seen, response = _answer(RequestFactory().get("/queues/1/next/"), write=True)
    assert seen == ["replica", "default"]
    assert PIN_COOKIE in response.cookies


def test_a_zero_window_pins_nobody(settings: Any) -> None:
    settings.STEPSCOPE_REPLICA_PIN_SECONDS = 0
    _, response = _answer(RequestFactory().post("/api/v1/projects/"))
    assert PIN_COOKIE not in response.cookies


@pytest.mark.django_db(transaction=True)
def test_reads_inside_a_transaction_stay_on_the_primary() -> None:
    """A transaction reads its own writes, even in a safe request."""
    router = ReplicaRouter()
    seen: list[str] = []

    def view(request: HttpRequest) -> HttpResponse:
        seen.append(router.db_for_read(Step))
        with transaction.atomic():
            seen.append(router.db_for_read(Step))
        seen.append(router.db_for_read(Step))
        return HttpResponse("ok")

    ReplicaReadsMiddleware(view)(RequestFactory().get("/p/demo/"))
    assert seen == ["replica", "default", "replica"]


def test_the_replica_url_reads_the_primarys_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_REPLICA_URL", raising=False)
    assert env_database_replica("DATABASE_REPLICA_URL", PRIMARY, "stepscope") is None
    monkeypatch.setenv("DATABASE_REPLICA_URL", "postgres://reader:pw@replica-host:5433")
    # A test's Celery worker renames the primary's database; the replica follows it.
    replica = env_database_replica("DATABASE_REPLICA_URL", {**PRIMARY, "NAME": "t"}, "stepscope")
    assert replica is not None
    assert (replica["HOST"], replica["PORT"], replica["USER"]) == ("replica-host", 5433, "reader")
    assert (replica["NAME"], replica["CONN_MAX_AGE"]) == ("t", 60)
    assert replica["TEST"] == {"MIRROR": "default"}
    assert replica["OPTIONS"] == {"options": "-c jit=off"}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://replica/stepscope", r"DATABASE_REPLICA_URL must be a postgres:// URL"),
        (
            "postgres://replica/other",
            r"DATABASE_REPLICA_URL names database 'other' and the primary 'stepscope'",
        ),
    ],
)
def test_a_bad_replica_url_stops_start_up_naming_it(
    monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    monkeypatch.setenv("DATABASE_REPLICA_URL", url)
    with pytest.raises(ConfigError, match=message):
        env_database_replica("DATABASE_REPLICA_URL", PRIMARY, "stepscope")


@pytest.mark.django_db
def test_readiness_refuses_a_replica_that_is_not_a_standby(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DATABASE_REPLICA_URL that reaches a primary (a promoted replica, or the primary
    itself) fails /readyz, saying so."""
    from django.db import connections

    from stepscope import health

    default = connections["default"]
    monkeypatch.setattr(health, "connections", {"default": default, "replica": default})
    check = health.replica_check()
    assert not check["ok"]
    assert "not in recovery" in check["error"]
