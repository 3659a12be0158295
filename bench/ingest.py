"""Import throughput: a generated 100,000-step Stepscope JSONL through the real import
path, against a bare COPY of the same step rows into a scratch table, in the same run.

    make bench            # or: .venv/bin/python bench/ingest.py [--steps N]

Prints one line per measurement and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from trajectories import synthetic  # noqa: E402
from trajectories.formats import parser_for  # noqa: E402
from trajectories.formats.base import ParsedTrajectory  # noqa: E402
from trajectories.hashing import prefix_hashes  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

STEPS_PER_ROLLOUT = 7  # six operations and the answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    tasks = -(-args.steps // (4 * STEPS_PER_ROLLOUT))

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        steps = synthetic.write_jsonl(path, synthetic.rollouts(tasks=tasks, seed=int(time.time())))
        size_mb = path.stat().st_size / 1e6
        print(f"generated {steps} steps ({size_mb:.1f} MB) in {tasks * 4} trajectories")

        # Parse only: what the Django-free parser and hashing cost on their own.
        start = time.perf_counter()
        records = [r for r in parser_for("stepscope")(path) if isinstance(r, ParsedTrajectory)]
        rows = []
        for number, record in enumerate(records):
            for index, (step, prefix) in enumerate(
                zip(record.steps, prefix_hashes(record.task, record.steps), strict=True)
            ):
                rows.append(
                    (
                        number, index, step.kind, step.role, step.agent, step.content,
                        step.tool_name, None, Jsonb(step.metadata), step.labelable, prefix,
                    )
                )  # fmt: skip
        parse_s = time.perf_counter() - start

        # Baseline: a bare COPY of the same step rows into an unindexed (but logged) scratch table.
        with connection.cursor() as wrapper:
            wrapper.execute(
                "CREATE TABLE scratch_steps (trajectory integer, index integer, kind text,"
                " role text, agent text, content text, tool_name text, tool_args jsonb,"
                " metadata jsonb, labelable boolean, prefix_hash text)"
            )
            start = time.perf_counter()
            with wrapper.cursor.copy("COPY scratch_steps FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            copy_s = time.perf_counter() - start
            wrapper.execute("DROP TABLE scratch_steps")

        project = project_create(slug=f"bench-{int(time.time())}", name="bench")
        try:
            start = time.perf_counter()
            batch = trajectory_import(project=project, source_format="stepscope", path=path)
            import_s = time.perf_counter() - start
        finally:
            _drop_project(project)

    assert batch.step_count == steps, (batch.step_count, steps)
    result = {
        "steps": steps,
        "import_s": round(import_s, 3),
        "import_steps_per_s": round(steps / import_s),
        "parse_and_hash_s": round(parse_s, 3),
        "bare_copy_s": round(copy_s, 3),
        "bare_copy_steps_per_s": round(steps / copy_s),
        "import_over_copy": round(import_s / copy_s, 2),
    }
    print(f"import (parse, hash, dedupe, COPY): {import_s:.2f} s, {steps / import_s:,.0f} steps/s")
    print(f"  of which parse + hash alone:     {parse_s:.2f} s")
    print(f"bare COPY of the same step rows:    {copy_s:.2f} s, {steps / copy_s:,.0f} steps/s")
    print(f"ratio import / bare COPY:           {import_s / copy_s:.1f}x")
    print(json.dumps(result))


def _drop_project(project: Project) -> None:
    """Remove the bench rows with plain SQL (the ORM's cascade would load them all)."""
    with connection.cursor() as cursor:
        trajectories = "SELECT id FROM trajectories_trajectory WHERE project_id = %s"
        steps = f"SELECT id FROM trajectories_step WHERE trajectory_id IN ({trajectories})"
        for statement in (
            f"DELETE FROM labeling_steplabel WHERE step_id IN ({steps})",
            f"DELETE FROM trajectories_step WHERE trajectory_id IN ({trajectories})",
            f"DELETE FROM trajectories_trajectorysource WHERE trajectory_id IN ({trajectories})",
            "DELETE FROM trajectories_trajectory WHERE project_id = %s",
        ):
            cursor.execute(statement, [project.pk])
    project.delete()


if __name__ == "__main__":
    main()
