"""The import helper's hot modules compiled with mypyc, where they can be (no Django).

A large import waits on the helper process that parses, hashes and encodes its file
(:mod:`trajectories.prepare`), and most of the helper's time goes to a few modules.
Compiled with mypyc, from the same sources unchanged, they take about a fifth less CPU.

``make install`` builds them (``python -m trajectories.compiled build``) into
``.build/compiled/<digest of their sources>/``. The helper loads that build only while
its digest is that of the sources as they are now, so an edited module never runs stale
compiled code; without a build (no compiler, a fresh edit, the Docker image) it runs
the modules as plain Python. Only the helper loads them, and only for :data:`FORMATS`:
the importing process, small imports and the tests' in-process imports run the plain
modules, and ``tests/trajectories/test_compiled.py`` checks both give the same chunks.
"""

# Django-free: the helper process and `make install` load it.
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
BUILDS = ROOT / ".build" / "compiled"

MODULES = (
    "trajectories.formats.base",
    "trajectories.formats.jsonio",
    "trajectories.formats.stepscope",
    "trajectories.hashing",
    "trajectories.pgcopy",
)
# Formats whose parser checks the type of every value it hands on. Compiled code checks
# declared types when it runs, so a parser that passed on an unchecked value (a number
# where a string is declared) could fail compiled where plain Python would not.
FORMATS = frozenset({"stepscope"})
# What mypy must read to check the modules: the package they are in.
_CHECKED = ("trajectories/__init__.py", "trajectories/hashing.py", "trajectories/pgcopy.py")
_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def sources_digest(root: Path = ROOT) -> str:
    """Names the build of the modules as they are under ``root``, for this Python."""
    digest = hashlib.sha256(f"{sys.version}\n{_SUFFIX}\n".encode())
    for name in MODULES:
        source = _source(root, name).read_bytes()
        digest.update(f"{name}\n{len(source)}\n".encode() + source)
    return digest.hexdigest()[:20]


def build_dir(root: Path = ROOT) -> Path:
    return BUILDS / sources_digest(root)


def build() -> Path:
    """Compile :data:`MODULES` unless the build for their sources exists; remove builds
    of other sources. Raises RuntimeError with mypyc's output when compiling fails."""
    target = build_dir()
    if target.is_dir():
        return target
    with tempfile.TemporaryDirectory() as scratch:
        work, staged = Path(scratch) / "sources", Path(scratch) / "build"
        for relative in [*_CHECKED, *_package_files("trajectories/formats")]:
            (work / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / relative, work / relative)
        (work / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\n")
        sources = [str(_source(work, name).relative_to(work)) for name in MODULES]
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", "--config-file", "mypy.ini", *sources],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"mypyc failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        # mypyc leaves each library beside its source, and the shared one at the top.
        for library in [*work.glob(f"*{_SUFFIX}"), *work.glob(f"trajectories/**/*{_SUFFIX}")]:
            (staged / library.relative_to(work)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(library, staged / library.relative_to(work))
        BUILDS.mkdir(parents=True, exist_ok=True)
        for old in BUILDS.iterdir():
            shutil.rmtree(old, ignore_errors=True)
        staged.rename(target)
    return target


def use(source_format: str) -> bool:
    """Import :data:`MODULES` from their build from now on, if this format may and a
    build for the present sources exists; whether it does. Call it before anything
    imports them."""
    target = build_dir()
    if source_format not in FORMATS or not target.is_dir():
        return False
    sys.meta_path.insert(0, _BuildFinder(target))
    return True


class _BuildFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules, and mypyc's shared library beside them, in a build."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES and not fullname.endswith("__mypyc"):
            return None
        library = self.root / (fullname.replace(".", "/") + _SUFFIX)
        if not library.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, library)


def _source(root: Path, name: str) -> Path:
    return root / (name.replace(".", "/") + ".py")


def _package_files(package: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / package).glob("*.py"))


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python -m trajectories.compiled build")
    try:
        print(f"compiled the import helper's modules: {build().relative_to(ROOT)}")
    except (RuntimeError, OSError) as error:
        # Plain Python runs the same code, only slower: not a reason to fail an install.
        print(f"the import helper's modules stay plain Python: {error}", file=sys.stderr)
