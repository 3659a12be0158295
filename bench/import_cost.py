"""What a change costs the import: ``bench/ingest.py`` run in this tree and in a base
commit's, alternately, in pairs, and the two set side by side.

    .venv/bin/python bench/import_cost.py                      # against 630ee36, 3 pairs
    .venv/bin/python bench/import_cost.py --base 630ee36 --pairs 5 --steps 200000

The base commit is checked out in a scratch git worktree (removed afterwards) that uses
this tree's virtual environment, its compiled import helper built and its own embedded
PostgreSQL migrated (its data folder is inside the worktree), so each side imports into
the schema it was written for. Each pair runs both sides back to back, in an order that
alternates, so that a busy spell on this shared machine falls on both. Per side: the
import's wall seconds, the importing process's and its PostgreSQL backend's CPU seconds
(steadier than wall time under load), and the import's time over a bare COPY of the same
rows in the same run (``bench/ingest.py``'s ratio, which cancels most of the load). Then
the medians and the ratios this tree / base (> 1: this tree is slower). A JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ("import_s", "import_client_cpu_s", "import_server_cpu_s", "import_over_bare_copy")


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {cwd}: {done.stderr[-2000:]}")
    return done.stdout


def base_tree(commit: str, parent: Path) -> Path:
    """A worktree of ``commit`` using this tree's virtual environment, migrated."""
    tree = parent / "base"
    run(["git", "worktree", "add", "--detach", "-q", str(tree), commit], ROOT)
    (tree / ".venv").symlink_to(ROOT / ".venv")
    python = str(tree / ".venv" / "bin" / "python")
    if (tree / "trajectories" / "compiled.py").exists():
        run([python, "-m", "trajectories.compiled", "build"], tree)
    run([python, "manage.py", "migrate", "-v", "0"], tree, side_env(tree))
    return tree


def side_env(tree: Path) -> dict[str, str]:
    """Each side its own embedded PostgreSQL, in its own data folder."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["STEPSCOPE_DATA_DIR"] = str(tree / ".stepscope-bench")
    return env


def ingest(tree: Path, steps: int) -> dict[str, float]:
    python = str(tree / ".venv" / "bin" / "python")
    out = run([python, "bench/ingest.py", "--steps", str(steps)], tree, side_env(tree))
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    figures["import_over_bare_copy"] = figures["import_s"] / figures["bare_copy_s"]
    return {name: float(figures[name]) for name in FIGURES}


def stop_postgres(tree: Path) -> None:
    python = str(tree / ".venv" / "bin" / "python")
    subprocess.run(
        [python, "-m", "stepscope.processes", "down"],
        cwd=tree,
        env=side_env(tree),
        capture_output=True,
        check=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="630ee36", help="the commit to compare against")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    print("command: python bench/import_cost.py " + " ".join(sys.argv[1:]))
    head = run(["git", "rev-parse", "--short", "HEAD"], ROOT).strip()
    print(f"this tree: {head} (with any uncommitted changes), base: {args.base}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (shared machine)")
    scratch = Path(tempfile.mkdtemp(prefix="import-cost-"))
    sides = {"this": ROOT, "base": Path()}
    results: dict[str, list[dict[str, float]]] = {"this": [], "base": []}
    try:
        sides["base"] = base_tree(args.base, scratch)
        run([sys.executable, "manage.py", "migrate", "-v", "0"], ROOT, side_env(ROOT))
        for pair in range(args.pairs):
            order = ["this", "base"] if pair % 2 == 0 else ["base", "this"]
            for side in order:
                results[side].append(ingest(sides[side], args.steps))
            line = ", ".join(
                f"{side} {results[side][-1]['import_s']:.2f} s"
                f" (CPU {results[side][-1]['import_client_cpu_s']:.2f}"
                f" + {results[side][-1]['import_server_cpu_s']:.2f})"
                for side in order
            )
            print(f"pair {pair + 1}: {line}")
    finally:
        stop_postgres(sides["this"])
        if sides["base"] != Path():
            stop_postgres(sides["base"])
            run(["git", "worktree", "remove", "--force", str(sides["base"])], ROOT)
        shutil.rmtree(scratch, ignore_errors=True)

    summary: dict[str, Any] = {"base": args.base, "head": head, "steps": args.steps}
    print(f"\n{args.steps:,} steps, {args.pairs} pairs, median (range):")
    for name in FIGURES:
        medians = {}
        for side in ("this", "base"):
            values = [r[name] for r in results[side]]
            medians[side] = statistics.median(values)
            summary[f"{side}_{name}"] = values
        ratio = medians["this"] / medians["base"]
        summary[f"ratio_{name}"] = round(ratio, 3)
        spread = {
            side: f"{min(r[name] for r in results[side]):.2f}-"
            f"{max(r[name] for r in results[side]):.2f}"
            for side in results
        }
        print(
            f"  {name:24} this {medians['this']:.2f} ({spread['this']})"
            f"  base {medians['base']:.2f} ({spread['base']})  this/base {ratio:.2f}"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
