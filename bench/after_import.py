"""The export preview right after a large labelled import, as it is and as it was
before the import analysed what it grew and the preview read its label source unscoped.

    .venv/bin/python bench/after_import.py                    # 2,000 x 20 steps, 3 rounds
    .venv/bin/python bench/after_import.py --trajectories 10000 --repeat 5

Each round, for each way in turn: the label tables and steps are vacuumed and analysed
(every way starts from statistics that match the tables), a project is made, a JSON Lines
file of ``--trajectories`` Stepscope records with an imported label on every step is
imported through ``trajectory_import`` (the CLI's and, in a worker, the upload's path),
and the export preview (``/p/<slug>/exports/preview/``, ``import:grader`` to
``trl-stepwise``) is asked three times at once, through Django's test client. The
baseline, in the same run, skips the ANALYZE after the import
(:mod:`stepscope.statistics`) and has the preview read the label source scoped to the
project, as both did before. Two cases it meets, depending on what the database holds:
tables that the import grows by much (statistics of the small tables they were), and a
new project in large tables (statistics that have not seen it: its rows estimated at
one). A round in which autovacuum analysed a table first is said. Prints the import time
and the previews' first and median seconds per way, medians and ranges over the rounds,
and a JSON line last. The projects are dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from exports.services import plan  # noqa: E402
from labeling.sources import label_source_sql  # noqa: E402
from trajectories.models import Project, ProjectDeletion  # noqa: E402
from trajectories.services import imports, project_create, project_deletion_run  # noqa: E402

PREVIEW = {"format": "trl-stepwise", "labels": "import:grader", "neutral": "drop"}
TABLES = ("trajectories_trajectory", "trajectories_step", "labeling_steplabel")


def records_write(path: Path, count: int, steps: int, seed: str) -> None:
    with path.open("w") as out:
        for n in range(count):
            record = {
                "id": f"{seed}-{n}",
                "task": f"Task {seed} {n}: what is {n} + {n}?",
                "steps": [
                    {
                        "content": f"Step {s} of {n}: we add {n} and {s}.",
                        "labels": [{"annotator": "grader", "value": 1 if (n + s) % 3 else -1}],
                    }
                    for s in range(steps)
                ],
            }
            out.write(json.dumps(record) + "\n")


def vacuumed() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM (ANALYZE) {', '.join(TABLES)}")


def autoanalysed() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT relname, autoanalyze_count FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            [list(TABLES)],
        )
        return dict(cursor.fetchall())


def scoped_always(
    project: Project, source: Any, *, scoped: bool = True, schema: str | None = None
) -> tuple[str, list[Any]]:
    """The label source as the preview read it before: scoped to the project."""
    return label_source_sql(project, source, schema=schema)


def dropped(project: Project) -> None:
    deletion = ProjectDeletion.objects.create(project=project, slug=project.slug, name=project.name)
    project_deletion_run(deletion_id=deletion.pk)
    deletion.delete()


def one_way(
    user: User, folder: Path, args: argparse.Namespace, tag: str, now: bool
) -> dict[str, Any]:
    vacuumed()
    project = project_create(slug=tag, name=tag, owner=user)
    path = folder / f"{tag}.jsonl"
    records_write(path, args.trajectories, args.steps, tag)
    kept = imports.analyze_when_grown
    before = autoanalysed()
    walls = []
    try:
        if not now:
            imports.analyze_when_grown = lambda later=None: []
            plan.label_source_sql = scoped_always
        start = time.perf_counter()
        imports.trajectory_import(project=project, source_format="stepscope", path=path)
        imported = time.perf_counter() - start
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(user)
        for _ in range(3):
            start = time.perf_counter()
            response = client.get(reverse("export-preview", args=[project.slug]), PREVIEW)
            walls.append(time.perf_counter() - start)
            if response.status_code != 200:
                raise RuntimeError(f"preview answered {response.status_code}")
    finally:
        imports.analyze_when_grown = kept
        plan.label_source_sql = label_source_sql
    autovacuum = autoanalysed() != before
    dropped(project)
    path.unlink()
    return {
        "import_s": imported,
        "first_s": walls[0],
        "median_s": statistics.median(walls),
        "autovacuum_first": autovacuum,
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=2_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    stamp = int(time.time())
    user = User.objects.create_user(f"bench-after-import-{stamp}")
    ways = {"now": True, "before": False}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in ways}
    try:
        with tempfile.TemporaryDirectory() as folder:
            for round_ in range(args.repeat):
                order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
                for name in order:
                    tag = f"bench-after-import-{stamp}-{round_}-{name}"
                    result = one_way(user, Path(folder), args, tag, ways[name])
                    results[name].append(result)
                    print(
                        f"round {round_ + 1} {name}: import {result['import_s']:.2f} s,"
                        f" preview first {result['first_s']:.2f} s,"
                        f" median {result['median_s']:.2f} s"
                        + (" (autovacuum analysed first)" if result["autovacuum_first"] else ""),
                        flush=True,
                    )
    finally:
        user.delete()
    print(f"\n{args.trajectories} x {args.steps} steps, {args.repeat} rounds, median (range):")
    for name, rounds in results.items():
        print(
            f"  {name:9} import {spread([r['import_s'] for r in rounds])},"
            f" preview first {spread([r['first_s'] for r in rounds])},"
            f" median {spread([r['median_s'] for r in rounds])}"
        )
    firsts = {
        name: statistics.median(r["first_s"] for r in rounds) for name, rounds in results.items()
    }
    print(f"  first preview, before / now: {firsts['before'] / firsts['now']:.2f}x")
    print(json.dumps({"trajectories": args.trajectories, "steps": args.steps, "results": results}))


if __name__ == "__main__":
    main()
