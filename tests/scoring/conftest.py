"""Scoring fixtures: tiny random models saved once per session, scorers that use them,
and Celery workers this module may kill."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scoring import prm
from scoring.models import Scorer
from tests import isolation
from tests.conftest import (  # noqa: F401 (the judge tests import these from here)
    JUDGE_CONTEXT,
    JUDGE_KEY_ENV,
    JUDGE_NAME,
    REPO_ROOT,
    OpenAIServer,
)
from tests.worker_forks import ForkedProcess, fork_server
from trajectories.models import Project


@dataclass(frozen=True)
class TinyModels:
    token_classifier: Path
    step_tag_lm: Path
    chat_turn_lm: Path
    sequence_classifier: Path
    encoder: Path


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    from scoring.prm import tiny

    root = tmp_path_factory.mktemp("tiny-models")
    return TinyModels(
        token_classifier=tiny.save_token_classifier(root / "token-classifier"),
        step_tag_lm=tiny.save_step_tag_lm(root / "step-tag-lm"),
        chat_turn_lm=tiny.save_chat_turn_lm(root / "chat-turn-lm"),
        sequence_classifier=tiny.save_sequence_classifier(root / "sequence-classifier"),
        encoder=tiny.save_encoder(root / "encoder"),
    )


@pytest.fixture(scope="session")
def slow_token_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bigger, so a chunk takes long enough to kill a worker in the middle of it."""
    from scoring.prm import tiny

    root = tmp_path_factory.mktemp("slow-model")
    return tiny.save_token_classifier(root / "token-classifier", layers=4, hidden=256)


@pytest.fixture
def make_scorer(tiny_models: TinyModels) -> Callable[..., Scorer]:
    paths = {
        prm.TOKEN_CLASSIFICATION: tiny_models.token_classifier,
        prm.STEP_TAG_LM: tiny_models.step_tag_lm,
        prm.CHAT_TURN_LM: tiny_models.chat_turn_lm,
        prm.SEQUENCE_CLASSIFIER: tiny_models.sequence_classifier,
    }

    def make(
        kind: str = prm.TOKEN_CLASSIFICATION,
        *,
        name: str = "",
        project: Project | None = None,
        model_ref: str = "",
        **fields: Any,
    ) -> Scorer:
        return Scorer.objects.create(
            name=name or kind,
            kind=kind,
            project=project,
            model_ref=model_ref or str(paths[kind]),
            **fields,
        )

    return make


# What a worker that loads one of the tiny models imports (torch, transformers, the model
# classes and the scorers), for ``Workers.start(preload=...)``.
MODEL_MODULES = (
    "torch",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.llama.modeling_llama",
    "scoring.prm.adapters",
    "scoring.prm.causal_lm",
)


class Workers:
    """Celery workers started (each in its own session, so a SIGKILL takes the pool
    children too) against the test database and the test broker."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.started: list[ForkedProcess] = []
        self.names: dict[int, str] = {}
        self.logs: dict[int, Path] = {}

    def start(
        self,
        queues: list[str],
        name: str,
        *,
        preload: tuple[str, ...] = (),
        wait: bool = True,
    ) -> ForkedProcess:
        """A worker on ``queues``, once it answers a ping (at once with ``wait=False``).
        ``preload``: modules the worker imports before it forks its pool child, so that
        the child's first task does not import them (``MODEL_MODULES`` for a worker that
        loads a model)."""
        # A worker restores messages a dead worker took but never acknowledged once they
        # are older than the visibility timeout (an hour by default on Redis), sweeping
        # every 100 s by default. Here: 4 s, swept every second, so that a kill test
        # waits seconds for the second worker to get the dead one's chunk. A live chunk
        # that runs longer is handed out again too, to the worker running it (the only
        # one on the queue), which takes the copy once it has finished and acknowledged
        # the original, and finds it done: the chunk tasks' redelivery check, which the
        # kill tests exercise anyway. A sweep holds a mutex in Redis that outlives a
        # worker killed while holding it, for 300 s by default, and no worker restores
        # anything until it expires: here 5 s.
        options = {
            "visibility_timeout": 4,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": 5,
        }
        imports = "".join(f"import {module}; " for module in preload)
        code = (
            f"{imports}from stepscope.celery import app; "
            f"app.conf.broker_transport_options.update({options!r}); "
            f"app.worker_main(['worker', '-Q', {','.join(queues)!r}, '--concurrency', '1',"
            f" '--pool', 'prefork', '-n', {name + '@%h'!r}, '--without-gossip',"
            " '--without-mingle', '--loglevel', 'INFO'])"
        )
        env = {
            **os.environ,
            "STEPSCOPE_TESTING": "1",
            "STEPSCOPE_DATABASE_NAME": self.database,
            # Each log line reaches the file at once: these workers end by SIGKILL,
            # which would lose what a buffer still held.
            "PYTHONUNBUFFERED": "1",
        }
        log = REPO_ROOT / ".stepscope" / f"test-{name}-{isolation.NAME}.log"
        log.parent.mkdir(exist_ok=True)
        # Forked from a process that has imported ``preload`` already: each kill test's
        # two workers no longer import torch and transformers again (tests/worker_forks.py).
        worker = fork_server(REPO_ROOT).fork(code, env=env, cwd=REPO_ROOT, log=log, preload=preload)
        self.started.append(worker)
        self.names[worker.pid] = f"{name}@{socket.gethostname()}"
        self.logs[worker.pid] = log
        if wait:
            self._wait_ready(worker)
        return worker

    def _wait_ready(self, worker: ForkedProcess) -> None:
        from stepscope.celery import app

        destination = [self.names[worker.pid]]
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=destination, timeout=0.5):
            if not worker.running() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"worker {destination[0]} did not start; see {self.logs[worker.pid]}"
                )

    def spare(self, name: str, *, preload: tuple[str, ...] = ()) -> ForkedProcess:
        """A worker started ahead of need, on a queue of its own that nothing is sent
        to, so that it takes no task until ``take_over`` points it at the real queues:
        the second worker of a kill test, starting (Django set up, models' modules
        imported) while the first one works instead of after the kill."""
        return self.start([f"spare-{name}"], name, preload=preload, wait=False)

    def take_over(self, worker: ForkedProcess, queues: list[str]) -> None:
        """Have ``worker`` consume ``queues`` from now on, as if started on them."""
        from stepscope.celery import app

        self._wait_ready(worker)
        destination = [self.names[worker.pid]]
        for queue in queues:
            replies = app.control.add_consumer(queue, destination=destination, reply=True)
            assert replies and all(
                "ok" in reply for answer in replies for reply in answer.values()
            ), replies

    def idle(self, worker: ForkedProcess) -> bool:
        """Whether ``worker`` runs no task and holds none in reserve."""
        from stepscope.celery import app

        inspect = app.control.inspect(destination=[self.names[worker.pid]], timeout=2, limit=1)
        active = inspect.active() or {}
        reserved = inspect.reserved() or {}
        return bool(active) and not any(active.values()) and not any(reserved.values())

    def kill(self, worker: ForkedProcess) -> None:
        """SIGKILL the worker and its pool children: no warm shutdown, no acks."""
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)

    def stop_all(self) -> None:
        """Stop every worker still running. One that, once it consumes nothing more, runs
        no task and holds none in reserve has no message unacknowledged: SIGKILL loses
        nothing then, and skips the seconds of a warm shutdown (closing the pool, the exit
        of interpreters that imported torch). Any other gets the warm shutdown (SIGTERM),
        which finishes what it runs and hands back what it holds."""
        live = [worker for worker in self.started if worker.running()]
        for worker in live:
            signal_number = signal.SIGKILL if self._drained(worker) else signal.SIGTERM
            os.killpg(worker.pid, signal_number)
        for worker in live:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)

    def _drained(self, worker: ForkedProcess) -> bool:
        """Stop ``worker`` consuming its queues; then whether it is idle (see ``idle``)."""
        from stepscope.celery import app

        destination = [self.names[worker.pid]]
        inspect = app.control.inspect(destination=destination, timeout=2, limit=1)
        answers = inspect.active_queues() or {}
        if not answers:
            return False
        for queue in [queue["name"] for queues in answers.values() for queue in queues]:
            if not app.control.cancel_consumer(queue, destination=destination, reply=True):
                return False
        return self.idle(worker)


@pytest.fixture
def workers(transactional_db: None) -> Iterator[Workers]:
    from django.db import connection

    started = Workers(connection.settings_dict["NAME"])
    try:
        yield started
    finally:
        started.stop_all()
