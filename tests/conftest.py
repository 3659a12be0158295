"""Personas shared by every test: a project with an owner (admin), an annotator, and an
outsider who is a member of nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.factories import MembershipFactory, UserFactory
from trajectories.models import Membership, Project
from trajectories.services import project_create

REPO_ROOT = Path(__file__).resolve().parent.parent
REALDATA = REPO_ROOT.parent / "shared" / "realdata"


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
        "STEPSCOPE_TESTING": "1",
        "STEPSCOPE_DATABASE_NAME": connection.settings_dict["NAME"],
    }
    log = REPO_ROOT / ".stepscope" / "test-worker.log"
    log.parent.mkdir(exist_ok=True)
    with log.open("wb") as log_file:
        worker = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "stepscope", "worker",
                "-Q", "default,gpu", "--concurrency", "1", "--pool", "prefork",
                "-n", f"test-{os.getpid()}@%h", "--without-gossip", "--without-mingle",
                "--loglevel", "INFO",
            ],
            cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=0.5):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"Celery worker did not start; see {log}:\n{log.read_text()[-3000:]}"
                )
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
