"""Keeps every test run apart from every other on the machine, and every xdist worker of a
run apart from the others (a pytest plugin, loaded with ``-p tests.isolation`` before
Django's settings are read).

Each process gets a name of its own, ``<run>_<worker>``: the run is xdist's id for the
whole run (or a fresh one without xdist) and the worker is ``gw0``, ``gw1``, … or
``main``. From it come the process's test database (``tests/databases.py``), the prefix
of every key its Celery traffic puts in Redis, and its media and models directories. Two runs of the
suite on one machine, on the embedded servers or the system ones, therefore share
nothing but the servers.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8] or secrets.token_hex(4)
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
NAME = f"{RUN}_{WORKER}"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Celery workers the tests start inherit these, so they use the same keys and files.
    os.environ["STEPSCOPE_TESTING"] = "1"
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        # Several test processes (and their Celery workers) share the cores: torch's
        # threads, one per core in each, would spin against each other.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["STEPSCOPE_BROKER_KEY_PREFIX"] = f"test-{NAME}:"
    files = Path(tempfile.mkdtemp(prefix=f"stepscope-test-{NAME}-"))
    os.environ["STEPSCOPE_MEDIA_ROOT"] = str(files / "media")
    os.environ["STEPSCOPE_MODELS_DIR"] = str(files / "models")
    # Local models may load from the run's models directory and from pytest's temporary
    # directories, where the session fixtures save their tiny models.
    pytest_temp = Path(tempfile.gettempdir()) / f"pytest-of-{getpass.getuser()}"
    os.environ["STEPSCOPE_MODEL_DIRS"] = f"{files / 'models'},{pytest_temp}"
    early_config.add_cleanup(lambda: shutil.rmtree(files, ignore_errors=True))
