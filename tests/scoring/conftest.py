"""Scoring fixtures: tiny random models saved once per session, scorers that use them,
and Celery workers this module may kill."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
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


class Workers:
    """Celery workers started (each in its own session, so a SIGKILL takes the pool
    children too) against the test database and the test broker."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, queues: list[str], name: str) -> subprocess.Popen[bytes]:
        from stepscope.celery import app

        # A worker restores messages a dead worker took but never acknowledged once they
        # are older than the visibility timeout (an hour by default on Redis), sweeping
        # every 100 s by default. Here: 8 s (longer than any chunk, model load included,
        # so live chunks are not handed out twice), swept every second. A sweep holds a
        # mutex in Redis that outlives a worker killed while holding it, for 300 s by
        # default, and no worker restores anything until it expires: here 5 s.
        options = {
            "visibility_timeout": 8,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": 5,
        }
        code = (
            "from stepscope.celery import app; "
            f"app.conf.broker_transport_options.update({options!r}); "
            f"app.worker_main(['worker', '-Q', {','.join(queues)!r}, '--concurrency', '1',"
            f" '--pool', 'prefork', '-n', {name + '@%h'!r}, '--without-gossip',"
            " '--without-mingle', '--loglevel', 'INFO'])"
        )
        env = {
            **os.environ,
            "STEPSCOPE_TESTING": "1",
            "STEPSCOPE_DATABASE_NAME": self.database,
        }
        log = REPO_ROOT / ".stepscope" / f"test-{name}-{isolation.NAME}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as log_file:
            worker = subprocess.Popen(
                [sys.executable, "-c", code],
                cwd=REPO_ROOT,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(worker)
        destination = [f"{name}@{socket.gethostname()}"]
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=destination, timeout=0.5):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start; see {log}")
        return worker

    def kill(self, worker: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and its pool children: no warm shutdown, no acks."""
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(worker.pid, signal.SIGKILL)
                    worker.wait(timeout=30)


@pytest.fixture
def workers(transactional_db: None) -> Iterator[Workers]:
    from django.db import connection

    started = Workers(connection.settings_dict["NAME"])
    try:
        yield started
    finally:
        started.stop_all()
