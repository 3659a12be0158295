"""Deleting a large project: the worker's batched deletion
(``trajectories.services.deletion``) of a project of a million steps, against Django's
one-transaction cascade (``Project.delete()``, what the admin site does) of a smaller
copy of the same project, in the same run.

    .venv/bin/python bench/delete.py                              # 1,000,000 steps
    .venv/bin/python bench/delete.py --steps 200000 --baseline-steps 100000 --repeat 3

Each project is imported through the real bulk path (20 steps a trajectory, an imported
label on every step of one trajectory in ten). The batched deletion runs in this process
as the worker runs it. Prints the total time, each batch's time (median, max: what bounds
how long a batch holds its locks), the rows removed by kind, steps per second for both
ways, and a JSON line last.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.db import transaction  # noqa: E402

from trajectories.models import Project, ProjectDeletion, Step  # noqa: E402
from trajectories.services import (  # noqa: E402
    project_create,
    project_deletion_run,
    trajectory_import,
)
from trajectories.services.deletion import DELETE_BATCH_STEPS  # noqa: E402

PER_TRAJECTORY = 20


def filled_project(slug: str, steps: int) -> Project:
    project = project_create(slug=slug, name=slug)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.jsonl"
        with path.open("w", encoding="utf-8") as out:
            for n in range(steps // PER_TRAJECTORY):
                labels = [{"annotator": "bench", "value": 1}] if n % 10 == 0 else []
                record = {
                    "id": f"{slug}-{n}",
                    "task": f"Task {n}: add the numbers and check the total twice",
                    "steps": [
                        {
                            "kind": "thought",
                            "content": f"Step {s}: we add {n} and {s}, then compare the sums.",
                            "labels": labels,
                        }
                        for s in range(PER_TRAJECTORY)
                    ],
                }
                out.write(json.dumps(record) + "\n")
        trajectory_import(project=project, source_format="stepscope", path=path)
    return project


def batched(steps: int, batch_steps: int) -> dict[str, object]:
    project = filled_project(f"bench-delete-{int(time.time())}", steps)
    stored = Step.objects.filter(trajectory__project=project).count()
    deletion = ProjectDeletion.objects.create(
        project=project, slug=project.slug, name=project.name, total_steps=stored
    )
    batches: list[float] = []
    last = time.perf_counter()

    def batch_done(_: int) -> None:
        nonlocal last
        now = time.perf_counter()
        batches.append(now - last)
        last = now

    start = time.perf_counter()
    project_deletion_run(deletion_id=deletion.pk, batch_steps=batch_steps, on_batch=batch_done)
    seconds = time.perf_counter() - start
    deletion.refresh_from_db()
    if deletion.status != "done" or Project.objects.filter(pk=project.pk).exists():
        raise RuntimeError(f"deletion ended {deletion.status}: {deletion.error}")
    return {
        "steps": stored,
        "seconds": seconds,
        "batches": len(batches),
        "batch_median": statistics.median(batches),
        "batch_max": max(batches),
        "removed": deletion.removed,
    }


def cascade(steps: int) -> dict[str, object]:
    project = filled_project(f"bench-cascade-{int(time.time())}", steps)
    stored = Step.objects.filter(trajectory__project=project).count()
    start = time.perf_counter()
    with transaction.atomic():
        _, counts = Project.objects.filter(pk=project.pk).delete()
    return {"steps": stored, "seconds": time.perf_counter() - start, "removed": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--baseline-steps", type=int, default=100_000)
    parser.add_argument("--batch-steps", type=int, default=DELETE_BATCH_STEPS)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    runs: list[dict[str, object]] = []
    baselines: list[dict[str, object]] = []
    for n in range(args.repeat):
        run = batched(args.steps, args.batch_steps)
        runs.append(run)
        print(
            f"run {n + 1}: batched {run['steps']} steps in {run['seconds']:.1f} s, "
            f"{run['batches']} batches, median {run['batch_median']:.2f} s, "
            f"max {run['batch_max']:.2f} s",
            flush=True,
        )
        if args.baseline_steps:
            base = cascade(args.baseline_steps)
            baselines.append(base)
            print(f"       cascade {base['steps']} steps in {base['seconds']:.1f} s", flush=True)
    seconds = [float(str(r["seconds"])) for r in runs]
    rate = statistics.median(float(str(r["steps"])) / float(str(r["seconds"])) for r in runs)
    print(f"\nbatched: {statistics.median(seconds):.1f} s ({min(seconds):.1f}-{max(seconds):.1f})")
    print(f"  {rate:,.0f} steps/s; removed {runs[-1]['removed']}")
    result: dict[str, object] = {"batched": runs, "batched_steps_per_s": rate}
    if baselines:
        base_rate = statistics.median(
            float(str(b["steps"])) / float(str(b["seconds"])) for b in baselines
        )
        print(
            f"cascade (one transaction): {base_rate:,.0f} steps/s; batched / cascade rate "
            f"{rate / base_rate:.2f}"
        )
        result.update(cascade=baselines, cascade_steps_per_s=base_rate)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
