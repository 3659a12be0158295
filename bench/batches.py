"""What a versioned batch costs an export: the same export written plain and into a batch
(its rows read in the export's snapshot, then written with the version), and the diff of
two versions, in the same run.

    .venv/bin/python bench/batches.py                     # 200,000 steps
    .venv/bin/python bench/batches.py --steps 1000000 --repeat 3

Data: the arithmetic rollouts of ``trajectories.synthetic`` imported into a throwaway
project with their truth labels (``import:synthetic-truth``), as ``bench/export.py``
makes them. Each repeat writes ``trl-stepwise`` JSONL (the bulk path) once plain
(``export_write``, the baseline) and once into a batch (what the worker does for a job
with a batch: the files, the rows in the same snapshot, then ``batch_version_add``),
alternating so a busy spell falls on both. Then a tenth of the trajectories' labels
change and one more version is written, and the diff of the last two versions is timed.
Prints the fastest and slowest of each side, the ratio of the fastest, and a JSON line
last. The project and its rows are dropped at the end, also when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from exports.models import BatchVersion, ExportBatch, ExportJob  # noqa: E402
from exports.selectors import batch_diff  # noqa: E402
from exports.services import export_plan_build, export_write  # noqa: E402
from exports.services.batches import batch_version_add  # noqa: E402
from exports.services.exports import _export_write  # noqa: E402
from trajectories import synthetic  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

LABELS = "import:synthetic-truth"


def setup(project: Project, steps: int, per_trajectory: int) -> int:
    tasks = -(-steps // (4 * per_trajectory))
    records = synthetic.rollouts(tasks=tasks, steps_per_task=per_trajectory - 1, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rollouts.jsonl"
        synthetic.write_jsonl(path, records)
        imported = trajectory_import(project=project, source_format="stepscope", path=path)
    with connection.cursor() as cursor:
        for table in ("trajectories_trajectory", "trajectories_step", "labeling_steplabel"):
            cursor.execute(f"ANALYZE {table}")
    return imported.step_count


def plan(project: Project) -> Any:
    return export_plan_build(project=project, format="trl-stepwise", labels=LABELS, neutral="drop")


def plain(project: Project) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        export_write(plan(project), out_dir=Path(tmp))
        return time.perf_counter() - start


def into_batch(project: Project, batch: ExportBatch) -> tuple[float, float, BatchVersion]:
    """The whole export into the batch, and of it the version's write."""
    job = ExportJob.objects.create(
        project=project, format="trl-stepwise", label_source=LABELS, neutral="drop", batch=batch
    )
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        _, rows = _export_write(plan(project), out_dir=Path(tmp), progress=None, batch=True)
        assert rows is not None
        written = time.perf_counter()
        with transaction.atomic():
            version = batch_version_add(job=job, rows=rows)
        end = time.perf_counter()
        return end - start, end - written, version


def relabel(project: Project, share: float) -> int:
    """Turn the imported label of the first step of every n-th trajectory round."""
    every = round(1 / share)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE labeling_steplabel l SET value = -l.value FROM trajectories_step s"
            " WHERE s.id = l.step_id AND s.index = 0 AND s.trajectory_id %% %s = 0"
            " AND s.trajectory_id IN"
            " (SELECT id FROM trajectories_trajectory WHERE project_id = %s)",
            [every, project.pk],
        )
        return cursor.rowcount


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(" ".join(["bench/batches.py", *sys.argv[1:]]))
    project = project_create(slug=f"bench-batches-{os.getpid()}", name="bench batches")
    try:
        steps = setup(project, args.steps, args.steps_per_trajectory)
        batch = ExportBatch.objects.create(project=project, name="bench")
        plains, batched, writes = [], [], []
        version = None
        for _ in range(args.repeat):
            plains.append(plain(project))
            seconds, write, version = into_batch(project, batch)
            batched.append(seconds)
            writes.append(write)
        assert version is not None
        changed = relabel(project, 0.1)
        _, _, newest = into_batch(project, batch)
        start = time.perf_counter()
        diff = batch_diff(version, newest)
        diff_seconds = time.perf_counter() - start
        assert diff.counts["labels"]["changed"] == changed, (diff.counts, changed)
        figures = {
            "steps": steps,
            "trajectories": newest.trajectories,
            "plain_s": [round(s, 3) for s in plains],
            "batch_s": [round(s, 3) for s in batched],
            "version_write_s": [round(s, 3) for s in writes],
            "ratio_fastest": round(min(batched) / min(plains), 3),
            "diff_s": round(diff_seconds, 3),
            "labels_changed": changed,
        }
        print(f"{steps:,} steps, {newest.trajectories:,} trajectories, trl-stepwise jsonl")
        print(f"plain export     fastest {min(plains):.2f} s  slowest {max(plains):.2f} s")
        print(f"into a batch     fastest {min(batched):.2f} s  slowest {max(batched):.2f} s")
        print(f"  of it, writing the version and its rows: fastest {min(writes):.2f} s")
        print(f"ratio (fastest)  {figures['ratio_fastest']:.2f}x the plain export")
        print(f"diff of two versions ({changed:,} labels changed): {diff_seconds:.3f} s")
        print(json.dumps(figures))
    finally:
        project_drop(project)


if __name__ == "__main__":
    main()
