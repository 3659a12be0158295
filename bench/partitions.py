"""Partitioning the step table by project: what it would change, measured on a copy.

    .venv/bin/python bench/partitions.py SLUG [--repeat 7]

Stepscope's ``trajectories_step`` is one table. The plan for 100M+ steps is to partition
it by project (LIST on a ``project_id`` the steps do not carry today). This script builds,
beside the real table and without touching it, two copies of the project's steps: a
plain table with the same unique (trajectory, index) index, and a table partitioned by
``project_id`` holding them in their project's partition (with the same index per
partition), plus one small partition of another project. It then times, on both, the
reads that change with partitioning against the real table as the app reads it today,
and the one that partitioning is for:

- a chunk of 200 steps of the project's longest trajectory (what the trajectory page
  reads), today by (trajectory, index) and in the partition by (project, trajectory,
  index);
- a whole-project pass (counting its labelable steps: the home's count; compare and the
  failure overview read the same way), today through the trajectories' project index,
  in the partition a scan of it alone;
- removing the project's steps: ``DELETE`` from the plain copy (without the
  real table's foreign keys and triggers: a lower bound of what a project's deletion
  costs today) against ``DROP`` of its partition.

Prints its command, one JSON line of figures (median and range of ``--repeat`` timings,
the copies' build times and sizes) and drops the copies. Run it against a database that
holds a large project (``bench/growth.py --keep``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from trajectories.models import Project  # noqa: E402

COLUMNS = "id, trajectory_id, index, kind, role, agent, content, labelable"
OTHER = -1  # the small second partition's project id (no real project has it)


def _timed(cursor: Any, sql: str, params: list[Any], repeat: int) -> dict[str, float]:
    cursor.execute(sql, params)  # warm
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        cursor.execute(sql, params)
        cursor.fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return {
        "median": round(statistics.median(times), 2),
        "min": round(min(times), 2),
        "max": round(max(times), 2),
    }


def _size(cursor: Any, table: str) -> int:
    cursor.execute("SELECT pg_total_relation_size(%s::regclass)", [table])
    return int(cursor.fetchone()[0]) // 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("slug")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"command: .venv/bin/python bench/partitions.py {args.slug} --repeat {args.repeat}")
    project = Project.objects.get(slug=args.slug)
    out: dict[str, Any] = {"project": args.slug}
    select = (
        f"SELECT {', '.join('s.' + c for c in COLUMNS.split(', '))}, t.project_id"
        " FROM trajectories_step s"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id WHERE t.project_id = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_step_plain, bench_step_parted CASCADE")
        started = time.perf_counter()
        cursor.execute(f"CREATE TABLE bench_step_plain AS {select}", [project.pk])
        cursor.execute("ALTER TABLE bench_step_plain ADD PRIMARY KEY (id)")
        cursor.execute("CREATE UNIQUE INDEX ON bench_step_plain (trajectory_id, index)")
        cursor.execute("ANALYZE bench_step_plain")
        out["plain_build_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        cursor.execute(
            "CREATE TABLE bench_step_parted (LIKE bench_step_plain) PARTITION BY LIST (project_id)"
        )
        cursor.execute(
            f"CREATE TABLE bench_step_p_{project.pk} PARTITION OF bench_step_parted"
            f" FOR VALUES IN ({project.pk})"
        )
        cursor.execute(
            "CREATE TABLE bench_step_p_other PARTITION OF bench_step_parted"
            f" FOR VALUES IN ({OTHER})"
        )
        cursor.execute("INSERT INTO bench_step_parted SELECT * FROM bench_step_plain")
        cursor.execute(
            f"INSERT INTO bench_step_parted SELECT id, trajectory_id, index, kind, role, agent,"
            f" content, labelable, {OTHER} FROM bench_step_plain ORDER BY id LIMIT 10000"
        )
        cursor.execute("ALTER TABLE bench_step_parted ADD PRIMARY KEY (project_id, id)")
        cursor.execute(
            "CREATE UNIQUE INDEX ON bench_step_parted (project_id, trajectory_id, index)"
        )
        cursor.execute("ANALYZE bench_step_parted")
        out["parted_build_s"] = round(time.perf_counter() - started, 1)
        out["steps"] = _count(cursor, project.pk)
        out["plain_mb"] = _size(cursor, "bench_step_plain")
        out["parted_mb"] = _size(cursor, f"bench_step_p_{project.pk}")

        cursor.execute(
            "SELECT trajectory_id FROM bench_step_plain GROUP BY trajectory_id"
            " ORDER BY count(*) DESC LIMIT 1"
        )
        (longest,) = cursor.fetchone()
        cols = ", ".join("s." + c for c in COLUMNS.split(", "))
        out["trajectory chunk"] = {
            "today": _timed(
                cursor,
                f"SELECT {cols} FROM trajectories_step s WHERE s.trajectory_id = %s"
                " AND s.index >= 0 ORDER BY s.index LIMIT 200",
                [longest],
                args.repeat,
            ),
            "partitioned": _timed(
                cursor,
                f"SELECT {cols} FROM bench_step_parted s WHERE s.project_id = %s"
                " AND s.trajectory_id = %s AND s.index >= 0 ORDER BY s.index LIMIT 200",
                [project.pk, longest],
                args.repeat,
            ),
        }
        passes = max(3, args.repeat // 2)
        out["project pass"] = {
            "today": _timed(
                cursor,
                "SELECT count(*) FROM trajectories_step s JOIN trajectories_trajectory t"
                " ON t.id = s.trajectory_id WHERE t.project_id = %s AND s.labelable",
                [project.pk],
                passes,
            ),
            "partitioned": _timed(
                cursor,
                "SELECT count(*) FROM bench_step_parted WHERE project_id = %s AND labelable",
                [project.pk],
                passes,
            ),
        }
        started = time.perf_counter()
        cursor.execute("DELETE FROM bench_step_plain")
        out["remove the project's steps: DELETE ms"] = round((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        cursor.execute(f"DROP TABLE bench_step_p_{project.pk}")
        out["remove the project's steps: DROP partition ms"] = round(
            (time.perf_counter() - started) * 1000, 1
        )
        cursor.execute("DROP TABLE IF EXISTS bench_step_plain, bench_step_parted CASCADE")
    print(json.dumps(out))


def _count(cursor: Any, project_id: int) -> int:
    cursor.execute("SELECT count(*) FROM bench_step_parted WHERE project_id = %s", [project_id])
    return int(cursor.fetchone()[0])


if __name__ == "__main__":
    main()
