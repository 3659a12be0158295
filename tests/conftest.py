"""Personas shared by every test: a project with an owner (admin), an annotator, and an
outsider who is a member of nothing."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connections
from hypothesis import settings as hypothesis_settings

from tests import isolation
from tests.databases import TestDatabase, flush_install
from tests.factories import MembershipFactory, UserFactory
from tests.waiting import wait_until
from trajectories.models import Membership, Project
from trajectories.services import project_create

# Property tests check what is accepted, not how fast: on a machine shared with other
# runs an example can take past Hypothesis's 200 ms deadline and fail a correct check.
hypothesis_settings.register_profile("stepscope", deadline=None)
hypothesis_settings.load_profile("stepscope")

REPO_ROOT = Path(__file__).resolve().parent.parent
REALDATA = REPO_ROOT.parent / "shared" / "realdata"


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker: Any) -> Iterator[None]:
    """This process's own database, copied from a migrated template (tests/databases.py)
    instead of migrated from scratch; a committing test's flush deletes its rows instead
    of truncating every table."""
    flush_install()
    with django_db_blocker.unblock():
        database = TestDatabase(isolation.NAME)
        database.create()
    yield
    with django_db_blocker.unblock():
        database.drop()


def _commits(item: pytest.Item) -> bool:
    """Whether the test commits its rows (transactional_db), so that its flush follows."""
    marker = item.get_closest_marker("django_db")
    return "transactional_db" in getattr(item, "fixturenames", ()) or (
        marker is not None and bool(marker.kwargs.get("transaction", False))
    )


# What the tests' workers run with: webhooks to the tests' receivers on loopback, and
# retries seconds apart rather than minutes (bench/webhooks.py keeps the real back-off).
WORKER_SETTINGS = {
    "STEPSCOPE_WEBHOOK_ALLOW_PRIVATE": "1",
    "STEPSCOPE_WEBHOOK_RETRY_SECONDS": "0.2,0.4,0.8,1,1,1,1,1,1,1,1,1",
    # The demo showcase starts each stage within a second of the last, not five.
    "STEPSCOPE_DEMO_ADVANCE_SECONDS": "1",
}

# This process's Celery worker, once the session's ``celery_worker`` has started it.
_WORKER_NAMES: list[str] = []
WORKER_IDLE_TIMEOUT_S = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Before a committing test's flush (transactional_db): drop what the test left
    queued, and with this process's worker running, wait until it is done with what it
    took. A queued task for rows the flush deletes would reach the worker during a later
    test, fail on missing rows, or keep it busy for minutes; a running one (the search
    index an import's commit set off) wrote while the flush truncated the tables, and the
    two deadlocked."""
    if _commits(item):
        from stepscope.celery import app

        def idle() -> bool:
            # Reserved too: a task the worker prefetched before the purge runs after it.
            inspect = app.control.inspect(destination=_WORKER_NAMES, timeout=2, limit=1)
            active = inspect.active() or {}
            reserved = inspect.reserved() or {}
            return bool(active) and not any(active.values()) and not any(reserved.values())

        app.control.purge()
        if _WORKER_NAMES:
            wait_until(idle, WORKER_IDLE_TIMEOUT_S)
    yield


@pytest.fixture
def project(db: None) -> Project:
    return project_create(slug="demo", name="Demo")


@pytest.fixture
def owner(project: Project) -> User:
    user = UserFactory.create(username="owner")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ADMIN)
    return user


@pytest.fixture
def annotator(project: Project) -> User:
    user = UserFactory.create(username="annotator")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
    return user


@pytest.fixture
def outsider(db: None) -> User:
    return UserFactory.create(username="outsider")


@pytest.fixture(scope="session")
def _playwright() -> Iterator[tuple[Any, list[Any]]]:
    """Playwright's driver, started once a process (the first browser test starts it),
    and the one Chromium it keeps (in a list, so that a crashed browser is replaced).
    Fails, not skips, without Chromium: `make test` installs it, and a skipped browser
    test would let a whole flow go untested while the suite stays green."""
    import playwright.sync_api as playwright_api

    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.fail("no Chromium on this machine; run `make browser` (apt-get install chromium)")
    with playwright_api.sync_playwright() as playwright:
        browsers: list[Any] = []
        yield playwright, browsers
        _loop_resume()
        for browser in browsers:
            browser.close()


# While Playwright's sync API is open, its event loop counts as running in this thread
# (asyncio keeps the running loop per thread): every later test of the process would run
# in an async context, where Django refuses ORM calls. Between browser modules the loop
# is therefore marked as not running, and marked again before the next module's first
# call; nothing runs it in between (it runs only inside Playwright's calls).
_PAUSED_LOOP: list[Any] = []


def _loop_pause() -> None:
    loop = asyncio._get_running_loop()
    if loop is not None:
        _PAUSED_LOOP[:] = [loop]
        asyncio._set_running_loop(None)


def _loop_resume() -> None:
    if _PAUSED_LOOP:
        asyncio._set_running_loop(_PAUSED_LOOP.pop())


# Playwright's own --disable-features (its chromiumSwitches.ts), which a second
# --disable-features would replace rather than add to; tests/test_chromium_flags.py
# checks the list against the installed Playwright's.
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
# And the omnibox popup: Chromium renders it, a WebUI page, in a renderer process of its
# own for every window, and Playwright opens a window for each context. It was a third of
# Chromium's CPU in the browser tests, for an address bar no test has.
CHROMIUM_DISABLED_FEATURES = (
    *PLAYWRIGHT_DISABLED_FEATURES,
    "WebUIOmniboxPopup",
    "WebUIOmniboxAimPopup",
    "WebUIOmniboxFullPopup",
)


@pytest.fixture(scope="module")
def chromium(_playwright: tuple[Any, list[Any]]) -> Iterator[Any]:
    """The process's headless Debian Chromium (Playwright cannot download browsers here),
    for the tests of one module; each test gets a fresh context of it. One browser a
    process rather than one a module: starting Playwright's driver and Chromium took
    about a second of CPU, for each of ~50 modules."""
    playwright, browsers = _playwright
    _loop_resume()
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls
    # are still plain synchronous code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    if not browsers or not browsers[0].is_connected():
        browsers[:] = [
            playwright.chromium.launch(
                executable_path=shutil.which("chromium") or shutil.which("chromium-browser"),
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-features=" + ",".join(CHROMIUM_DISABLED_FEATURES),
                ],
            )
        ]
    yield browsers[0]
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    _loop_pause()


@pytest.fixture(scope="session")
def live_server() -> Iterator[Any]:
    """pytest-django's live server, with its static files served by the app's own
    WhiteNoise, as in production, rather than by Django's test handler: that one reads
    each file from disk again on every request and lets the browser cache none of them,
    so every page a browser test opened fetched its eight scripts and styles again."""
    from pytest_django.live_server_helper import LiveServer

    server = LiveServer(os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost", start=False)
    server.thread.static_handler = _the_app  # type: ignore[assignment]  # any handler -> handler
    server.start()
    yield server
    server.stop()


def _the_app(handler: Any) -> Any:
    return handler


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A page in a new browser context (its own cookies and storage)."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    # Under Playwright's sync API the test's ORM calls get a connection of their own
    # (Django keeps connections per context); close it so the test database can go.
    connections.close_all()
    context.close()
    assert errors == [], f"JavaScript errors: {errors}"


def celery_worker_log_path() -> Path:
    return REPO_ROOT / ".stepscope" / f"test-worker-{isolation.NAME}.log"


def celery_worker_log(lines: int = 40) -> str:
    """The end of this process's worker log, for a failing test to show."""
    text = celery_worker_log_path().read_text(errors="replace")
    return "worker log:\n" + "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: None, django_db_blocker: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker process on both queues, using the broker the settings chose
    (embedded Redis by default) and the test database. Tests that hand it rows must use
    ``transactional_db`` so the rows are committed where the worker can see them."""
    from django.db import connection

    from stepscope.celery import app

    env = {
        **os.environ,
        **WORKER_SETTINGS,
        "STEPSCOPE_TESTING": "1",
        "STEPSCOPE_DATABASE_NAME": connection.settings_dict["NAME"],
    }
    name = f"test-{os.getpid()}@{socket.gethostname()}"
    log = celery_worker_log_path()
    log.parent.mkdir(exist_ok=True)
    with log.open("wb") as log_file:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "stepscope",
                "worker",
                "-Q",
                "default,gpu",
                "--concurrency",
                "1",
                "--pool",
                "prefork",
                "-n",
                name,
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=0.5):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Celery worker did not start; see {log}:\n{log.read_text()[-3000:]}"
                )
        _WORKER_NAMES[:] = [name]
        yield worker
    finally:
        _WORKER_NAMES.clear()
        # A cold shutdown, not waited for here: nothing the worker holds outlives the
        # session, and the pool's wind-down (2-3 s, idle) overlaps the rest of the teardown.
        worker.send_signal(signal.SIGQUIT)
        atexit.register(_reap, worker)


def _reap(process: subprocess.Popen[bytes]) -> None:
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def reward_worker(django_db_setup: None) -> Iterator[subprocess.Popen[bytes]]:
    """A real reward worker process (``manage.py reward_worker``) on this process's
    Redis keys. It reads no database, so one serves the whole session."""
    from scoring.services.rewards import reward_channel

    log = REPO_ROOT / ".stepscope" / f"test-reward-worker-{isolation.NAME}.log"
    log.parent.mkdir(exist_ok=True)
    channel = reward_channel()
    channel.client.delete(channel.alive_key)
    with log.open("wb") as log_file:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "reward_worker"],
            cwd=REPO_ROOT,
            env={**os.environ, "STEPSCOPE_TESTING": "1"},
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        if not wait_until(lambda: bool(channel.client.exists(channel.alive_key)), 60):
            raise RuntimeError(f"the reward worker did not start; see {log}")
        yield worker
    finally:
        # Killed: the session is over, and a graceful stop (its read ends within a second,
        # then the interpreter's exit) kept the teardown waiting 2.3 s.
        worker.kill()
        worker.wait()
        channel.client.delete(channel.alive_key)


# The modules that use the stand-in judge endpoint run on one xdist worker, so one
# endpoint process is started (it loads torch and the tiny judge: 5-10 s), not one on
# each worker; whole modules, so that a module's own fixtures are still built once.
SHARED_SERVER = "openai_server"


def _xdist_groups_apply(items: list[pytest.Item]) -> None:
    """``--dist loadgroup`` sends the tests of one ``xdist_group`` to one worker by the
    ``@group`` suffix of their ids, which pytest-xdist 3.8 sets as ``item._nodeid``;
    pytest 9 reads the id from ``item._id`` instead, so without this every group was
    spread over the workers (two deployment stacks at once, the Django-free probe run
    on each worker). Run on each worker after xdist's own hook; a no-op once it works."""
    from _pytest.nodeid import NodeId

    judged = {
        item.nodeid.split("::", 1)[0]
        for item in items
        if SHARED_SERVER in getattr(item, "fixturenames", ())
    }
    for item in items:
        names = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        module = item.nodeid.split("::", 1)[0]
        if not names and module in judged:
            names = [SHARED_SERVER]
        elif not names and _uses_own_module_fixture(item):
            names = [module]
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)


def _uses_own_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture of its own module (rows written once
    a module, a module's worker). Such a module runs on one xdist worker as a group:
    spread test by test, as loadgroup spreads ungrouped tests, each worker built the
    fixture again (the attribution module's worker, 12-16 s, was started twice)."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    return any(
        fixture.scope == "module" and fixture.baseid == module
        for fixtures in definitions
        for fixture in fixtures
    )


# Fixtures and marks that mean a test needs a server: PostgreSQL, the broker, a Celery
# worker, a browser or the deployed stack.
NEEDS_SERVERS = {"django_db_setup", "db", "transactional_db", "live_server", "celery_worker"}
SERVER_MARKS = ("django_db", "celery", "browser", "stack")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="only the tests that need no database, broker, worker or browser (make test-fast)",
    )


# The suite's longest tests (a minute or more each on a quiet machine: every route as
# every role, the API fuzz, the deployed stack, the showcase) run first, so the two
# xdist workers do not end with one of them still on a long test while the other waits.
LONGEST_FIRST = (
    "tests/security/",
    "tests/deployment/",
    "tests/demo/",
    "tests/scoring/test_trained_head.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "loadgroup", False):
        _xdist_groups_apply(items)
        items.sort(key=lambda item: not item.nodeid.startswith(LONGEST_FIRST))
    if not config.getoption("--fast"):
        return
    fast: list[pytest.Item] = []
    slow: list[pytest.Item] = []
    for item in items:
        needs = NEEDS_SERVERS.intersection(getattr(item, "fixturenames", ()))
        marked = any(item.get_closest_marker(mark) for mark in SERVER_MARKS)
        (slow if needs or marked else fast).append(item)
    config.hook.pytest_deselected(items=slow)
    items[:] = fast


# --- The stand-in judge endpoint (tests/scoring/openai_server.py), for the judge tests and
# the reward service's: one process a session.

# The key the test endpoint wants, in the environment under this name for the workers
# (started later, with a copy of this environment) as a remote judge's api_key_env.
JUDGE_KEY_ENV = "STEPSCOPE_TEST_JUDGE_KEY"
JUDGE_KEY = "sk-test-" + uuid.uuid4().hex
os.environ[JUDGE_KEY_ENV] = JUDGE_KEY
JUDGE_NAME = "tiny-judge"
# The test endpoint's context, small enough for a long step to pass it.
JUDGE_CONTEXT = 768


@pytest.fixture(scope="session")
def tiny_judge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scoring.prm import tiny

    return tiny.save_judge_lm(tmp_path_factory.mktemp("tiny-judge") / "judge")


@dataclass
class OpenAIServer:
    """The test endpoint (tests/scoring/openai_server.py), a process on loopback."""

    base_url: str
    process: subprocess.Popen[str]

    def _call(self, path: str, payload: dict[str, Any] | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(
            self.base_url.removesuffix("/v1") + path,
            data=data,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def control(self, **settings: Any) -> None:
        self._call("/control", settings)

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self._call("/stats")
        return stats


@pytest.fixture(scope="session")
def openai_server_process(tiny_judge: Path) -> Iterator[OpenAIServer]:
    log = REPO_ROOT / ".stepscope" / f"test-openai-server-{isolation.NAME}.log"
    log.parent.mkdir(exist_ok=True)
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.scoring.openai_server",
                "--model",
                str(tiny_judge),
                "--name",
                JUDGE_NAME,
                "--key",
                JUDGE_KEY,
                "--max-context",
                str(JUDGE_CONTEXT),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "PORT n" once it listens; "" if it died
        if not line.startswith("PORT "):
            raise RuntimeError(f"the test endpoint did not start; see {log}")
        yield OpenAIServer(f"http://127.0.0.1:{int(line.split()[1])}/v1", process)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def openai_server(openai_server_process: OpenAIServer) -> OpenAIServer:
    openai_server_process.control(reset=True)
    return openai_server_process
