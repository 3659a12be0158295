"""The apps stack one way, and computation modules do not import Django.

The layer order (``docs/architecture.md`` shows it as a table): a module may import, and
name in SQL the tables of, only its own unit and the units of lower layers. Every import
counts, at any depth (a lazy import inside a function too), and so do the modules named
by string (``include("x.urls")``, ``apps.get_model("x.Model")``, ``import_module("x")``).
The SQL check looks for every model table (from Django's app registry, so a moved model
keeps its owner) as a word inside string literals, docstrings aside. What breaks the
order and has not been undone yet is listed below with its reason; a new one fails.

Django-free modules are found by rule, not by a list: every module of the packages in
``DJANGO_FREE_PACKAGES`` and every module with a line starting ``# Django-free`` near its
top. Each is imported in a fresh interpreter with no Django settings, and the test fails
if any ``django`` module was loaded along the way."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps

REPO_ROOT = Path(__file__).resolve().parents[1]

# Lowest first. Units in one layer do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("stepscope", "metrics"),
    # Users' own things (API tokens), below every app that holds project data.
    ("accounts",),
    ("trajectories",),
    ("labeling",),
    ("scoring",),
    ("rollouts",),
    ("evaluation",),
    # Exports: its page's counts are one of evaluation's kept summaries.
    ("exports",),
    # Semantic search (and, next, failure modes): reads the steps, the labels and the
    # label sources below it; fills the selection language's narrowing hook.
    ("discovery",),
    # Rules that act as trajectories arrive, and webhooks: on every app they act through.
    ("automation",),
    # The project list and home (every app's numbers), and the demo (make run's login,
    # projects and background work).
    ("home", "demo"),
    # The URL roots.
    ("top",),
)
# The stepscope modules that gather every app (the URL and API roots): the "top" unit.
TOP_MODULES = ("stepscope.urls", "stepscope.api_urls")
# Top-level folders that are no layer: they may import anything.
NOT_LAYERED = frozenset({"tests", "bench"})

DJANGO_FREE_PACKAGES = (
    "metrics",
    "trajectories/formats",
    "exports/writers",
    "scoring/prm",
    "scoring/judges",
    "rollouts/generation",
)
MARKER = re.compile(r"^# Django-free\b", re.MULTILINE)
# Imports a Django-free module may never make (the probe below catches the indirect ones).
DJANGO_PACKAGES = frozenset({"django", "rest_framework", "celery", "kombu", "pghistory"})

# (importing module, imported module) -> why it is still allowed.
IMPORT_EXCEPTIONS: dict[tuple[str, str], str] = {}

# (module, table) -> why its SQL may still name that higher app's table.
SQL_EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Reference:
    module: str
    line: int
    target: str


def unit_of(name: str) -> str:
    for top in TOP_MODULES:
        if name == top or name.startswith(top + "."):
            return "top"
    return name.split(".")[0]


def layer_of(unit: str) -> int | None:
    for index, units in enumerate(LAYERS):
        if unit in units:
            return index
    return None


def allowed(source: str, target: str) -> bool:
    """Whether unit ``source`` may depend on unit ``target``."""
    low, high = layer_of(target), layer_of(source)
    if low is None or source == target:
        return True  # third-party, the standard library, or itself
    assert high is not None, source
    return low < high


def layered_units() -> list[str]:
    return [unit for units in LAYERS for unit in units if unit != "top"]


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def first_party_paths() -> tuple[Path, ...]:
    """Every module of a layered unit, migrations aside."""
    paths: list[Path] = []
    for unit in layered_units():
        folder = REPO_ROOT / unit
        paths += [path for path in folder.rglob("*.py") if "migrations" not in path.parts]
    return tuple(sorted(paths))


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


NAMED_BY_STRING = {"include", "get_model", "import_module"}


def references(path: Path) -> Iterator[Reference]:
    return references_in(module_name(path), path.name == "__init__.py", parsed(path))


def references_in(module: str, is_package: bool, tree: ast.Module) -> Iterator[Reference]:
    """The modules that ``tree`` imports or names by string, anywhere in its body."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Reference(module, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node)
            for alias in node.names:
                yield Reference(module, node.lineno, f"{base}.{alias.name}")
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if name in NAMED_BY_STRING and isinstance(first, ast.Constant):
                yield Reference(module, node.lineno, str(first.value).split(":")[0])


@cache
def first_party_modules() -> frozenset[str]:
    return frozenset(module_name(path) for path in first_party_paths())


def known_module(name: str) -> str:
    """The longest prefix of ``name`` that is a module (``from a import b`` names ``a.b``,
    which may be a module or a name in ``a``)."""
    modules = first_party_modules()
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return name


@cache
def import_violations() -> tuple[tuple[str, str, int], ...]:
    found = []
    for path in first_party_paths():
        for ref in references(path):
            if not allowed(unit_of(ref.module), unit_of(ref.target)):
                found.append((ref.module, known_module(ref.target), ref.line))
    return tuple(found)


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            ids.add(id(body[0].value))
    return ids


@cache
def tables() -> dict[str, str]:
    """Every model table -> the unit of the app that owns it."""
    owners = {}
    for model in apps.get_models(include_auto_created=True):
        unit = unit_of(model.__module__)
        if layer_of(unit) is not None:
            owners[model._meta.db_table] = unit
    return owners


def tables_named(module: str, tree: ast.Module) -> Iterator[tuple[str, int]]:
    """The model tables that string literals of ``tree`` name, docstrings aside."""
    pattern = re.compile(r"\b(" + "|".join(sorted(tables(), key=len, reverse=True)) + r")\b")
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for table in sorted(set(pattern.findall(node.value))):
                yield table, node.lineno


@cache
def sql_violations() -> tuple[tuple[str, str, int], ...]:
    found = []
    for path in first_party_paths():
        module = module_name(path)
        for table, line in tables_named(module, parsed(path)):
            if not allowed(unit_of(module), tables()[table]):
                found.append((module, table, line))
    return tuple(found)


# A statement that writes a table: its name follows the keyword. Upper-case keywords and
# lower-case table names, as the code writes them, so "DO UPDATE SET" names no table.
WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|COPY|TRUNCATE(?:\s+TABLE)?)\s+(?:ONLY\s+)?"
    r"([a-z_][a-z0-9_]*)"
)


def tables_written(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """The model tables that SQL in string literals of ``tree`` writes, docstrings aside."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for table in sorted(set(WRITE.findall(node.value))):
                if table in tables():
                    yield table, node.lineno


def write_violations() -> list[str]:
    found = []
    for path in first_party_paths():
        module = module_name(path)
        for table, line in tables_written(parsed(path)):
            if tables()[table] != unit_of(module):
                found.append(f"{module}:{line} writes {table}")
    return found


def test_every_package_has_a_layer() -> None:
    packages = {p.parent.name for p in REPO_ROOT.glob("*/__init__.py")}
    assert packages - NOT_LAYERED <= set(layered_units()), "place the new app in LAYERS"
    for top in TOP_MODULES:
        assert (REPO_ROOT / (top.replace(".", "/") + ".py")).exists(), top


def test_imports_follow_the_layers() -> None:
    found = import_violations()
    new = [f"{m}:{line} imports {t}" for m, t, line in found if (m, t) not in IMPORT_EXCEPTIONS]
    assert new == [], "an import against the layer order:\n" + "\n".join(new)


def test_sql_names_only_lower_tables() -> None:
    found = sql_violations()
    new = [f"{m}:{line} names {t}" for m, t, line in found if (m, t) not in SQL_EXCEPTIONS]
    assert new == [], "SQL naming a higher app's table:\n" + "\n".join(new)


def test_sql_writes_only_its_own_tables() -> None:
    # Reading a lower app's tables is fine; writing them goes through that app's service,
    # so its rules (and its triggers' assumptions) hold for every writer.
    assert write_violations() == [], "call the owning app's service instead"


def test_exceptions_are_all_still_needed() -> None:
    # An exception whose import is gone comes off the list, so the list stays the to-do.
    imports = {(m, t) for m, t, _ in import_violations()}
    sql = {(m, t) for m, t, _ in sql_violations()}
    assert sorted(set(IMPORT_EXCEPTIONS) - imports) == []
    assert sorted(set(SQL_EXCEPTIONS) - sql) == []


def test_the_walk_sees_lazy_and_string_imports() -> None:
    # Guards against a walk that could never fail.
    tree = ast.parse(
        '"""Docstrings may name scoring_stepcredit."""\n'
        "def late():\n"
        "    from rollouts.models import RolloutJob\n"
        "    from . import views\n"
        "    include('scoring.urls')\n"
        "    return 'SELECT 1 FROM scoring_stepscore'\n"
    )
    targets = {ref.target for ref in references_in("trajectories.probe", False, tree)}
    assert targets == {"rollouts.models.RolloutJob", "trajectories.views", "scoring.urls"}
    assert [unit_of(t) for t in sorted(targets) if not allowed("trajectories", unit_of(t))] == [
        "rollouts",
        "scoring",
    ]
    assert list(tables_named("trajectories.probe", tree)) == [("scoring_stepscore", 6)]
    writes = ast.parse(
        "A = 'INSERT INTO labeling_queueitem (queue_id) SELECT 1'\n"
        "B = 'UPDATE trajectories_trajectory AS t SET x = 1'\n"
        "C = 'INSERT INTO scoring_stepscore (x) VALUES (1) ON CONFLICT DO UPDATE SET x = 2'\n"
    )
    assert sorted(tables_written(writes)) == [
        ("labeling_queueitem", 1),
        ("scoring_stepscore", 3),
        ("trajectories_trajectory", 2),
    ]
    assert not allowed("labeling", tables()["scoring_stepscore"])
    assert not allowed("evaluation", "exports")
    assert not allowed("stepscope", "top")
    assert allowed("top", "exports")
    assert allowed("scoring", "metrics")


# Django-free modules.


@cache
def django_free_paths() -> tuple[Path, ...]:
    paths: set[Path] = set()
    for package in DJANGO_FREE_PACKAGES:
        folder = REPO_ROOT / package
        assert (folder / "__init__.py").exists(), f"{package} is named Django-free but missing"
        paths |= {path for path in folder.rglob("*.py") if "migrations" not in path.parts}
    for path in first_party_paths():
        if MARKER.search(path.read_text()[:3000]):
            paths.add(path)
    return tuple(sorted(paths))


def django_free_modules() -> list[str]:
    return [module_name(path) for path in django_free_paths()]


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


def test_module_list_covers_the_computation() -> None:
    modules = django_free_modules()
    for name in ("base", "stepscope", "processbench", "openai_messages"):
        assert f"trajectories.formats.{name}" in modules
    for name in ("trajectories.formats", "trajectories.hashing", "scoring.attribution"):
        assert name in modules
    assert "metrics.agreement" in modules
    assert "exports.writers.columnar" in modules


def test_django_free_modules_import_only_django_free_code() -> None:
    free = set(django_free_modules())
    found = []
    for path in django_free_paths():
        for ref in references(path):
            top = ref.target.split(".")[0]
            target = known_module(ref.target)
            first_party = layer_of(unit_of(ref.target)) is not None
            if top in DJANGO_PACKAGES or (first_party and target not in free):
                found.append(f"{ref.module}:{ref.line} imports {ref.target}")
    assert found == []


# All the Django-free modules imported into one interpreter without Django settings: if
# Django stays out of sys.modules, no one of them loads it (imports only add modules).
TOGETHER_PROBE = """
import importlib, json, sys
errors = {}
for module in sys.argv[1].split(","):
    try:
        importlib.import_module(module)
    except BaseException as error:
        errors[module] = {"error": repr(error)}
loaded = [m for m in sys.modules if m == "django" or m.startswith("django.")]
print(json.dumps({"errors": errors, "loaded": loaded}))
"""

# When Django did load, which module brought it: a child forked per module from one
# interpreter that has loaded only ``PRELOADED``, the heavy libraries they share (a fresh
# interpreter per module took half a minute). None of them loads Django; if one did,
# every module's check would fail, not pass.
PRELOADED = ("numpy", "scipy", "pyarrow", "orjson", "ijson", "torch", "transformers", "captum")

FORKING_PROBE = """
import importlib, json, os, sys
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
results = {}
for module in sys.argv[2].split(","):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(module)
            loaded = [m for m in sys.modules if m == "django" or m.startswith("django.")]
            answer = json.dumps(loaded)
        except BaseException as error:
            answer = json.dumps({"error": repr(error)})
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        results[module] = json.loads(pipe.read())
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


def probe_run(probe: str, *arguments: str) -> Any:
    """The JSON a probe prints, run in a fresh interpreter with no Django settings."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    completed = subprocess.run(
        [sys.executable, "-c", probe, *arguments],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def django_modules_loaded_by_each(
    modules: list[str], preloaded: tuple[str, ...] = PRELOADED
) -> dict[str, object]:
    """For each module, the Django modules loaded by importing it alone (or an error):
    one import of them all answers when none does, the forking probe names the culprits."""
    together = probe_run(TOGETHER_PROBE, ",".join(modules))
    if not together["errors"] and not together["loaded"]:
        return {module: [] for module in modules}
    loaded: dict[str, object] = probe_run(FORKING_PROBE, ",".join(preloaded), ",".join(modules))
    return loaded


@cache
def django_free_probe() -> dict[str, object]:
    return django_modules_loaded_by_each(django_free_modules())


def test_probe_sees_django_when_it_is_imported() -> None:
    # Guards against probes that could never fail.
    assert "django.conf" in django_modules_loaded_by("import django.conf")
    forked = django_modules_loaded_by_each(["json", "django.conf"], preloaded=("csv",))
    assert forked["json"] == []
    assert isinstance(forked["django.conf"], list) and "django.conf" in forked["django.conf"]
    assert django_modules_loaded_by_each(["json", "csv"]) == {"json": [], "csv": []}
    failing = django_modules_loaded_by_each(["json", "no_such_module_here"], preloaded=("csv",))
    assert "error" in failing["no_such_module_here"]  # type: ignore[operator]


# One worker runs these, so the Django-free probe runs once (the rest of the module goes
# wherever there is room).
@pytest.mark.xdist_group("layering")
@pytest.mark.parametrize("module", django_free_modules())
def test_module_does_not_import_django(module: str) -> None:
    assert django_free_probe()[module] == []
