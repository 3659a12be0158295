"""Computation modules must not import Django, so they stay fast to test, reusable from
scripts and benchmarks, and free of hidden database access. Each module is imported in a
fresh interpreter with no Django settings, and the test fails if any ``django`` module
was loaded along the way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Django-free modules outside trajectories/formats/; those not written yet are skipped.
CANDIDATES = (
    "trajectories/hashing.py",
    "trajectories/pgcopy.py",
    "trajectories/prepare.py",
    "trajectories/synthetic.py",
    "trajectories/alignment.py",
    "trajectories/prefix_tree.py",
    "trajectories/batches/__init__.py",
    "trajectories/batches/inputs.py",
    "trajectories/batches/labels.py",
    "trajectories/batches/text.py",
    "trajectories/batches/records.py",
    "trajectories/batches/pairs.py",
    "trajectories/batches/rl.py",
    "trajectories/batches/splits.py",
    "trajectories/batches/schemas.py",
    "trajectories/batches/writers.py",
    "trajectories/batches/export.py",
    "trajectories/batches/manifest.py",
    "scoring/attribution.py",
    "scoring/methods.py",
    "scoring/copyio.py",
    "scoring/prm/coalitions.py",
    "scoring/prm/saliency.py",
    "scoring/prm/__init__.py",
    "scoring/prm/base.py",
    "scoring/prm/prompts.py",
    "scoring/prm/batching.py",
    "scoring/prm/metrics.py",
    "scoring/prm/adapters.py",
    "scoring/prm/head.py",
    "scoring/prm/tiny.py",
    "labeling/agreement.py",
    "labeling/charts.py",
    "labeling/compare_metrics.py",
    "rollouts/answers.py",
    "rollouts/search.py",
    "rollouts/continuations.py",
    "rollouts/demo_policy.py",
    "rollouts/generation/__init__.py",
    "rollouts/generation/base.py",
    "rollouts/generation/prompts.py",
    "rollouts/generation/generator.py",
    "rollouts/generation/vllm_backend.py",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def django_free_modules() -> list[str]:
    paths = sorted((REPO_ROOT / "trajectories" / "formats").glob("*.py"))
    paths += [REPO_ROOT / name for name in CANDIDATES if (REPO_ROOT / name).exists()]
    return [module_name(path) for path in paths]


def django_modules_loaded_by(statement: str) -> list[str]:
    probe = (
        f"import json, sys; {statement}; "
        "print(json.dumps([m for m in sys.modules if m == 'django' or m.startswith('django.')]))"
    )
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    loaded: list[str] = json.loads(completed.stdout.strip().splitlines()[-1])
    return loaded


def test_module_list_covers_the_parsers() -> None:
    modules = django_free_modules()
    for name in ("base", "stepscope", "processbench", "openai_messages"):
        assert f"trajectories.formats.{name}" in modules
    assert "trajectories.formats" in modules
    assert "trajectories.hashing" in modules
    assert "scoring.attribution" in modules
    assert "labeling.agreement" in modules


def test_probe_sees_django_when_it_is_imported() -> None:
    # Guards against a probe that could never fail.
    assert "django.conf" in django_modules_loaded_by("import django.conf")


@pytest.mark.parametrize("module", django_free_modules())
def test_module_does_not_import_django(module: str) -> None:
    assert django_modules_loaded_by(f"import {module}") == []
