"""The WSGI entry point loads every view before the first request and freezes what it
loaded out of the garbage collector's reach (stepscope/wsgi.py)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_wsgi_loads_the_views_and_freezes_them() -> None:
    probe = (
        "import gc, sys\n"
        "import stepscope.wsgi\n"
        "print(gc.get_freeze_count(), 'trajectories.api' in sys.modules, len(gc.get_objects()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    frozen, views_loaded, tracked = done.stdout.split()
    assert views_loaded == "True"
    # Django, DRF and the apps: well over 100,000 objects, none of them left to collect.
    assert int(frozen) > 100_000
    assert int(tracked) < 1000
