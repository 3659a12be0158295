"""Services and Celery tasks import each other one way (CONTRIBUTING.md, "Services and
tasks"): a tasks module imports the services it runs at its top; every other module
(services, views, commands) looks a task up only when it enqueues it, with an import
inside the function. So importing a service never imports a tasks module, and there is
no cycle to break by hand.

The check reads the source (no imports run): for every module of the apps, an import of
a tasks module (``x.tasks``, ``from x import tasks``, ``from x.tasks import y``) outside a
function, and, in a tasks module, an import of a services module inside a function."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Not app code: the tests and benchmarks may import anything anywhere.
NOT_APPS = frozenset({"tests", "bench"})


def app_modules() -> list[Path]:
    return sorted(
        path
        for package in REPO_ROOT.iterdir()
        if (package / "__init__.py").is_file() and package.name not in NOT_APPS
        for path in package.rglob("*.py")
        if "migrations" not in path.parts
    )


def _imported(node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The dotted names an import statement names (``from a import b``: ``a.b``)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif node.level == 0 and node.module:
        yield node.module
        yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _is(name: str, part: str) -> bool:
    """Whether ``name`` is a module named ``part`` of a package, or inside one."""
    return part in name.split(".")[1:]


def _imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it runs inside a function (lazily); those
    under ``if TYPE_CHECKING:`` never run and are left out."""

    def visit(node: ast.AST, lazy: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, lazy
            inner = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from visit(child, lazy or inner)

    yield from visit(tree, False)


def wrong_way(source: str, *, is_tasks: bool) -> list[tuple[int, str]]:
    """The imports of a module's ``source`` that go against the direction, with why."""
    found = []
    for node, lazy in _imports(ast.parse(source)):
        names = list(_imported(node))
        if not is_tasks and not lazy and any(_is(name, "tasks") for name in names):
            found.append((node.lineno, "imports a tasks module at its top"))
        if is_tasks and lazy and any(_is(name, "services") for name in names):
            found.append((node.lineno, "a task imports its services inside the task"))
    return found


def test_services_enqueue_tasks_by_a_lazy_lookup_and_tasks_import_services() -> None:
    modules = app_modules()
    tasks_modules = [path for path in modules if path.name == "tasks.py"]
    assert len(modules) > 200 and len(tasks_modules) >= 6
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {why}"
        for path in modules
        for line, why in wrong_way(path.read_text(), is_tasks=path.name == "tasks.py")
    ]
    assert not found, "services <-> tasks the wrong way:\n" + "\n".join(found)


def test_the_check_sees_each_wrong_way() -> None:
    top = "from __future__ import annotations\nfrom scoring import tasks\n"
    assert wrong_way(top, is_tasks=False) == [(2, "imports a tasks module at its top")]
    assert wrong_way("import exports.tasks\n", is_tasks=False)
    assert wrong_way("from trajectories.tasks import import_run\n", is_tasks=False)
    lazy = "def start() -> None:\n    from scoring import tasks\n    tasks.plan_run.delay(1)\n"
    assert wrong_way(lazy, is_tasks=False) == []
    typing_only = "if TYPE_CHECKING:\n    from scoring import tasks\n"
    assert wrong_way(typing_only, is_tasks=False) == []
    task = "@shared_task\ndef plan_run(pk: int) -> None:\n    from scoring import services\n"
    assert wrong_way(task, is_tasks=True) == [(3, "a task imports its services inside the task")]
    assert wrong_way("from scoring import services\n", is_tasks=True) == []
    # A tasks module's name alone is not a tasks module ("celery_tasks", "tasks_done").
    assert wrong_way("from demo import tasks_done\n", is_tasks=False) == []
