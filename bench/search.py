"""Search speed over a million stored steps: the trajectory list's search (its one query,
first page, every column) against bare baselines on the same rows, cold and warm.

    .venv/bin/python bench/search.py                      # 1,000,000 steps, 9 warm runs
    .venv/bin/python bench/search.py --steps 200000 --repeat 5
    .venv/bin/python bench/search.py --index-costs        # what each kind of index costs

The steps are ``bench/ingest.py``'s generated text (24 common words) imported through the
real import path, with marker words sprinkled at known rates: ``quokka`` in one step of
100,000, ``zebra`` in one of 1,000 and ``falcon`` in one of 20; ``answer`` is one of the
common words, in nearly every step. The search index is then built as the worker builds
it (``trajectory_search_index``), timed: that is the work the import no longer does.

For each query: the list page (``trajectory_list_page``: first 50 rows, newest first,
with the label, score and cost columns), how many trajectories match (``count()``), and
the baselines: the bare index probe (``count(*)`` of the step documents matching), the
same search with no index (each step's text read by ``to_tsvector``, as a trajectory is
searched before the worker reaches it) and a plain ``ILIKE '%word%'`` over the steps.
"Cold" is the first run on a fresh connection (PostgreSQL's shared buffers and the OS
cache are not dropped: the machine is shared); "warm" the median and range of the next
runs. ``--index-costs`` times an INSERT of the same steps into a scratch copy of the step
table with no index, a GIN index on ``to_tsvector('simple', left(content, 100000))``, and
a ``pg_trgm`` GIN index: what an index kept up by every import would cost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from bench.ingest import WORDS  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.selection import TrajectoryFilters  # noqa: E402
from trajectories.selectors import trajectories_filtered, trajectory_list_page  # noqa: E402
from trajectories.services import (  # noqa: E402
    project_create,
    trajectory_import,
    trajectory_search_index,
)

MARKERS = {"quokka": 100_000, "zebra": 1_000, "falcon": 20}
QUERIES = ["quokka", "zebra", "falcon", "answer", '"zebra falcon"', "zebra -falcon"]
# The unindexed baselines read every step (tens of seconds each): a rare and a common word.
BASELINE_QUERIES = ("quokka", "answer")


def write_steps(path: Path, steps: int, per_trajectory: int, chars: int, seed: int) -> int:
    rng = random.Random(seed)
    written = number = 0
    with path.open("w", encoding="utf-8") as out:
        while written < steps:
            count = min(per_trajectory, steps - written)
            record = {
                "id": f"search-{seed}-{number}",
                "task": f"Task {number % 5000}: " + _text(rng, chars // 2, markers=False),
                "task_key": f"task-{number % 5000}",
                "outcome": {"reward": float(number % 2), "success": number % 2 == 1},
                "steps": [{"kind": "thought", "content": _text(rng, chars)} for _ in range(count)],
            }
            out.write(json.dumps(record) + "\n")
            written += count
            number += 1
    return written


def _text(rng: random.Random, chars: int, *, markers: bool = True) -> str:
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    for marker, one_in in MARKERS.items() if markers else ():
        if rng.randrange(one_in) == 0:
            words.insert(rng.randrange(len(words) + 1), marker)
    return " ".join(words)


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = run()
    return (time.perf_counter() - start) * 1000, result


def fresh_connection() -> None:
    connection.close()
    connection.ensure_connection()


def sql_count(sql: str, params: list[Any]) -> Callable[[], int]:
    def run() -> int:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return int(cursor.fetchone()[0])

    return run


def measure(name: str, run: Callable[[], Any], repeat: int) -> dict[str, Any]:
    """Cold (first on a fresh connection), then ``repeat`` warm runs."""
    fresh_connection()
    cold_ms, result = timed(run)
    warm = [timed(run)[0] for _ in range(repeat)]
    figures = {
        "what": name,
        "cold_ms": round(cold_ms, 1),
        "warm_median_ms": round(statistics.median(warm), 1),
        "warm_min_ms": round(min(warm), 1),
        "warm_max_ms": round(max(warm), 1),
        "runs": repeat,
        "result": result if isinstance(result, int) else len(result[0]),
    }
    print(
        f"  {name:<34} cold {figures['cold_ms']:8.1f} ms   warm median"
        f" {figures['warm_median_ms']:8.1f} ms ({figures['warm_min_ms']:.1f}"
        f"..{figures['warm_max_ms']:.1f}, {repeat} runs)   -> {figures['result']:,}"
    )
    return figures


def search_figures(project: Project, query: str, repeat: int, baselines: bool) -> list[Any]:
    filters = TrajectoryFilters(q=query)
    print(f"search {query!r}:")
    rows = [
        measure(
            "list page (50 rows, all columns)",
            lambda: trajectory_list_page(project, filters),
            repeat,
        ),
        measure(
            "matching trajectories, count()",
            lambda: trajectories_filtered(project, filters).count(),
            repeat,
        ),
        measure(
            "bare index probe, count(*)",
            sql_count(
                "SELECT count(*) FROM trajectories_stepsearch"
                " WHERE document @@ websearch_to_tsquery('simple', %s)",
                [query],
            ),
            repeat,
        ),
    ]
    if baselines and query in BASELINE_QUERIES:
        slow = max(1, min(repeat, 2))
        rows.append(
            measure(
                "no index: to_tsvector per step",
                sql_count(
                    "SELECT count(DISTINCT s.trajectory_id) FROM trajectories_step s"
                    " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
                    " WHERE t.project_id = %s AND to_tsvector('simple'::regconfig,"
                    " left(s.content, 100000)) @@ websearch_to_tsquery('simple', %s)",
                    [project.pk, query],
                ),
                slow,
            )
        )
        rows.append(
            measure(
                "no index: ILIKE '%word%'",
                sql_count(
                    "SELECT count(DISTINCT s.trajectory_id) FROM trajectories_step s"
                    " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
                    " WHERE t.project_id = %s AND s.content ILIKE %s",
                    [project.pk, f"%{query}%"],
                ),
                slow,
            )
        )
    for row in rows:
        row["query"] = query
    return rows


def index_costs(project: Project) -> dict[str, float]:
    """INSERT the project's steps into scratch copies of the step table: bare, with the
    full-text GIN index, with a trigram GIN index (seconds, and the index's size)."""
    figures: dict[str, float] = {}
    indexes = {
        "none": "",
        "gin_tsvector": "CREATE INDEX ON bench_search_scratch USING gin"
        " (to_tsvector('simple'::regconfig, left(content, 100000)))",
        "gin_trgm": "CREATE INDEX ON bench_search_scratch USING gin (content gin_trgm_ops)",
    }
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        for name, ddl in indexes.items():
            cursor.execute("DROP TABLE IF EXISTS bench_search_scratch")
            cursor.execute("CREATE TABLE bench_search_scratch (LIKE trajectories_step)")
            if ddl:
                cursor.execute(ddl)
            cursor.execute("CHECKPOINT")
            start = time.perf_counter()
            cursor.execute(
                "INSERT INTO bench_search_scratch SELECT s.* FROM trajectories_step s"
                " JOIN trajectories_trajectory t ON t.id = s.trajectory_id WHERE t.project_id = %s",
                [project.pk],
            )
            figures[f"insert_{name}_s"] = round(time.perf_counter() - start, 2)
            cursor.execute("SELECT pg_indexes_size('bench_search_scratch')")
            figures[f"index_{name}_mb"] = round(cursor.fetchone()[0] / 1e6, 1)
            cursor.execute("DROP TABLE bench_search_scratch")
    print(
        "INSERT of the steps into a scratch step table:  "
        + ", ".join(f"{key} {value}" for key, value in figures.items())
    )
    return figures


def drop(project: Project) -> None:
    with connection.cursor() as cursor:
        trajectories = "SELECT id FROM trajectories_trajectory WHERE project_id = %s"
        for table in ("trajectories_stepsearch", "trajectories_trajectorysearch"):
            cursor.execute(
                f"DELETE FROM {table} WHERE trajectory_id IN ({trajectories})", [project.pk]
            )
    project_drop(project)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--step-chars", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=9, help="warm runs of each search")
    parser.add_argument("--no-baselines", action="store_true", help="skip the unindexed scans")
    parser.add_argument("--index-costs", action="store_true", help="time eager index kinds")
    parser.add_argument("--keep", action="store_true", help="keep the bench project")
    parser.add_argument("--reuse", metavar="SLUG", help="search a kept bench project again")
    args = parser.parse_args()
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"load average at start: {os.getloadavg()[0]:.1f} (shared machine, no nice)")
    summary: dict[str, Any] = {"steps": args.steps}
    if args.reuse:
        project = Project.objects.get(slug=args.reuse)
        summary["searches"] = [
            row for query in QUERIES for row in search_figures(project, query, args.repeat, False)
        ]
        print(json.dumps(summary))
        return

    project = project_create(slug=f"bench-search-{os.getpid()}-{int(time.time())}", name="bench")
    print(f"project: {project.slug}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "search.jsonl"
            steps = write_steps(path, args.steps, args.steps_per_trajectory, args.step_chars, 5)
            start = time.perf_counter()
            trajectory_import(project=project, source_format="stepscope", path=path)
            summary["import_s"] = round(time.perf_counter() - start, 2)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE trajectories_step, trajectories_trajectory")
        start = time.perf_counter()
        documents = trajectory_search_index(project_id=project.pk)
        summary["index_build_s"] = round(time.perf_counter() - start, 2)
        assert documents == steps, (documents, steps)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE trajectories_stepsearch, trajectories_trajectorysearch")
            cursor.execute(
                "SELECT pg_relation_size('trajectories_stepsearch'),"
                " pg_indexes_size('trajectories_stepsearch')"
            )
            table_bytes, index_bytes = cursor.fetchone()
        summary["stepsearch_table_mb"] = round(table_bytes / 1e6, 1)
        summary["stepsearch_index_mb"] = round(index_bytes / 1e6, 1)
        print(
            f"{steps:,} steps imported in {summary['import_s']} s; search documents built"
            f" in {summary['index_build_s']} s (the worker's work, off the import);"
            f" step documents {summary['stepsearch_table_mb']} MB"
            f" + GIN {summary['stepsearch_index_mb']} MB (the table holds every project)"
        )
        rows = []
        for query in QUERIES:
            rows.extend(search_figures(project, query, args.repeat, not args.no_baselines))
        summary["searches"] = rows
        if args.index_costs:
            summary["index_costs"] = index_costs(project)
    finally:
        if not args.keep:
            drop(project)
    summary["load_average_end"] = round(os.getloadavg()[0], 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
