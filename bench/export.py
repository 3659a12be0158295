"""Export throughput and memory: a million labelled steps through the real export service
to ``trl-stepwise`` JSONL and to ``rl`` Parquet, against a bare ``COPY (SELECT ...) TO
STDOUT`` of the same columns of the same rows, in the same run.

    make bench
    .venv/bin/python bench/export.py                    # 1,000,000 steps
    .venv/bin/python bench/export.py --steps 100000 --repeat 3

Data: the arithmetic rollouts of ``trajectories.synthetic`` (``--steps-per-trajectory``
steps each, four rollouts a task, about half with an injected slip), imported through
``trajectory_import`` into a throwaway project with their truth labels as imported labels
(``import:synthetic-truth``: good until the slip, bad at it, unlabelled after it). An
attribution run (``group-relative``: each rollout's outcome against its task's others)
gives every step a credit, which the ``rl`` rows carry. Setup is not timed.

Each measurement runs in a child process of its own, so its peak RSS (``VmHWM``; see
``_peak_rss_mb``) is its own: the export service (``export_plan_build`` +
``export_write``: one snapshot, labels and credits resolved in PostgreSQL; both formats
measured here take the bulk paths of ``exports/services/bulk.py``, rl
Parquet parsed from one CSV COPY and trl-stepwise records built by PostgreSQL, which
write the same bytes as the row builders) and, for each format, the baseline: the same
columns (task, step text and label; for ``rl`` also the trajectory's ids and outcome, the
step's index, role, kind and credit) of the same steps, in the export's order, streamed
with ``COPY`` and thrown away; with ``--repeat N`` each side is measured N times, alternating, and
the fastest counts. Rates are steps per second; the ratio is the export's rate over the
baseline's (the target is at least 0.5). Prints one line per figure and a JSON line
last. The project and its rows are dropped at the end, also when a step fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
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

from django.db import connection  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from exports.services import export_plan_build, export_write  # noqa: E402
from trajectories import synthetic  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

LABELS = "import:synthetic-truth"
ROLLOUTS_PER_TASK = 4
# (format, container): what each export writes.
EXPORTS = {"trl-stepwise": "jsonl", "rl": "parquet"}

# The columns each format's records carry, read in the export's order (task key, task
# text, trajectory, step). The label comes from the same imported labels.
_LABEL_JOIN = (
    " LEFT JOIN (SELECT l.step_id, l.value FROM labeling_steplabel l"
    "   JOIN auth_user u ON u.id = l.annotator_id"
    "   WHERE u.username = %(labels)s AND l.status = 'submitted') ref ON ref.step_id = s.id"
)
BASELINES = {
    "trl-stepwise": (
        "SELECT t.task, s.content, ref.value"
        " FROM trajectories_step s JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        f"{_LABEL_JOIN}"
        " WHERE t.project_id = %(project)s AND s.labelable"
        " ORDER BY t.task_key, md5(t.task), s.trajectory_id, s.index"
    ),
    "rl": (
        "SELECT s.trajectory_id, t.external_id, t.task_key, s.index, s.role, s.kind,"
        " s.labelable, s.content, ref.value, c.value, t.outcome_reward, t.success"
        " FROM trajectories_step s JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        f"{_LABEL_JOIN}"
        " LEFT JOIN scoring_stepcredit c ON c.step_id = s.id AND c.run_id = %(run)s"
        " WHERE t.project_id = %(project)s"
        " ORDER BY t.task_key, md5(t.task), s.trajectory_id, s.index"
    ),
}


def _peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM``, its memory's high-water mark since exec. On
    Linux ``ru_maxrss`` carries the parent's peak across fork and exec, so a child started
    by a parent that has just imported a million steps would report the parent's size."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_export(slug: str, format_name: str, out: Path, credit_run: int) -> dict[str, Any]:
    """In a fresh interpreter: one export through the service, timed."""
    project = Project.objects.get(slug=slug)
    ready_mb = _peak_rss_mb()
    start = time.perf_counter()
    plan = export_plan_build(
        project=project,
        format=format_name,
        labels=LABELS,
        neutral="drop",
        container=EXPORTS[format_name],
        credit_run=credit_run if format_name == "rl" else None,
    )
    manifest = export_write(plan, out_dir=out)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "steps": manifest["counts"]["steps"],
        "records": sum(f["rows"] for f in manifest["files"].values()),
        "bytes": sum(f["bytes"] for f in manifest["files"].values()),
        "ready_rss_mb": ready_mb,
        "peak_rss_mb": _peak_rss_mb(),
    }


def child_copy(slug: str, format_name: str, credit_run: int) -> dict[str, Any]:
    """In a fresh interpreter: the bare COPY of the same columns, read and thrown away."""
    project = Project.objects.get(slug=slug)
    params = {"project": project.pk, "labels": LABELS, "run": credit_run}
    ready_mb = _peak_rss_mb()
    with connection.cursor() as wrapper:
        query = wrapper.cursor.mogrify(BASELINES[format_name], params)
        start = time.perf_counter()
        size = 0
        with wrapper.cursor.copy(f"COPY ({query}) TO STDOUT") as copy:
            for block in copy:
                size += len(block)
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "bytes": size,
        "ready_rss_mb": ready_mb,
        "peak_rss_mb": _peak_rss_mb(),
    }


def _rss(result: dict[str, Any]) -> str:
    return f"{result['peak_rss_mb']:.0f} MB ({result['ready_rss_mb']:.0f} MB)"


def _best(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of repeated measurements, with the highest peak RSS of them all."""
    best = dict(min(results, key=lambda result: result["seconds"]))
    best["peak_rss_mb"] = max(result["peak_rss_mb"] for result in results)
    return best


def run_child(*args: str) -> dict[str, Any]:
    child = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if child.returncode != 0:
        sys.exit(f"child {args} failed:\n{child.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return result


def credited(project: Project) -> Any:
    """A finished group-relative attribution run over the project. Its plan and chunks
    go through Celery in production; here they run in this process (setup, not
    measured)."""
    from scoring import tasks
    from scoring.services import attribution_chunk_run, attribution_run_plan, attribution_run_start

    originals = (tasks.attribution_plan.apply_async, tasks.attribution_chunk.apply_async)
    tasks.attribution_plan.apply_async = lambda *a, **k: None
    tasks.attribution_chunk.apply_async = lambda *a, **k: None
    try:
        run = attribution_run_start(project=project, method="group-relative")
        attribution_run_plan(run_id=run.pk)
        for chunk_id in run.chunks.values_list("pk", flat=True):
            attribution_chunk_run(chunk_id=chunk_id)
    finally:
        tasks.attribution_plan.apply_async, tasks.attribution_chunk.apply_async = originals
    run.refresh_from_db()
    if run.status != "done":
        raise RuntimeError(f"the attribution run ended {run.status}: {run.error}")
    return run


def setup(project: Project, steps: int, per_trajectory: int, seed: int) -> tuple[int, int]:
    """Import the rollouts and credit them; returns (steps imported, attribution run id)."""
    tasks_needed = -(-steps // (ROLLOUTS_PER_TASK * per_trajectory))
    records = synthetic.rollouts(
        tasks=tasks_needed,
        rollouts_per_task=ROLLOUTS_PER_TASK,
        steps_per_task=per_trajectory - 1,
        seed=seed,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rollouts.jsonl"
        synthetic.write_jsonl(path, records)
        batch = trajectory_import(project=project, source_format="stepscope", path=path)
    run = credited(project)
    with connection.cursor() as cursor:
        for table in (
            "trajectories_trajectory",
            "trajectories_step",
            "labeling_steplabel",
            "scoring_stepcredit",
        ):
            cursor.execute(f"ANALYZE {table}")
    return batch.step_count, run.pk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument(
        "--repeat", type=int, default=1, help="measurements of each side; the fastest counts"
    )
    parser.add_argument(
        "--child", nargs=4, metavar=("KIND", "SLUG", "FORMAT", "RUN"), help=argparse.SUPPRESS
    )
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, slug, format_name, run = args.child
        if kind == "export":
            result = child_export(slug, format_name, args.out, int(run))
        else:
            result = child_copy(slug, format_name, int(run))
        print(json.dumps(result))
        return

    seed = int(time.time())
    project = project_create(slug=f"bench-export-{os.getpid()}", name="bench export")
    figures: dict[str, Any] = {}
    try:
        start = time.perf_counter()
        steps, run_id = setup(project, args.steps, args.steps_per_trajectory, seed)
        print(f"{steps:,} labelled steps, credited, in {time.perf_counter() - start:.1f} s (setup)")
        print("peak RSS: the measuring child's VmHWM (in brackets: before it began, Django alone)")
        print(
            f"{'export':<14} {'seconds':>8} {'steps/s':>10} {'peak RSS':>20}"
            f" {'COPY s':>7} {'COPY steps/s':>13} {'COPY RSS':>20} {'ratio':>6}"
        )
        for format_name in EXPORTS:
            runs, baselines = [], []
            # Alternating, so a busy spell on the machine falls on both sides.
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    child = ["--child", "export", project.slug, format_name, str(run_id)]
                    runs.append(run_child(*child, "--out", tmp))
                baselines.append(
                    run_child("--child", "copy", project.slug, format_name, str(run_id))
                )
            exported = _best(runs)
            baseline = _best(baselines)
            assert exported["steps"] == steps, (exported, steps)
            rate = steps / exported["seconds"]
            copy_rate = steps / baseline["seconds"]
            figures[format_name] = {
                "export_s": round(exported["seconds"], 2),
                "export_steps_per_s": round(rate),
                "export_peak_rss_mb": round(exported["peak_rss_mb"]),
                # The child's peak before the export began (Django and its imports).
                "export_ready_rss_mb": round(exported["ready_rss_mb"]),
                "records": exported["records"],
                "file_mb": round(exported["bytes"] / 1e6, 1),
                "copy_s": round(baseline["seconds"], 2),
                "copy_steps_per_s": round(copy_rate),
                "copy_mb": round(baseline["bytes"] / 1e6, 1),
                "copy_peak_rss_mb": round(baseline["peak_rss_mb"]),
                "copy_ready_rss_mb": round(baseline["ready_rss_mb"]),
                "ratio": round(rate / copy_rate, 3),
            }
            print(
                f"{format_name:<14} {exported['seconds']:>8.2f} {rate:>10,.0f}"
                f" {_rss(exported):>20} {baseline['seconds']:>7.2f}"
                f" {copy_rate:>13,.0f} {_rss(baseline):>20} {rate / copy_rate:>6.3f}"
            )
    finally:
        project_drop(project)
    print(json.dumps({"steps": steps, "exports": figures}))


if __name__ == "__main__":
    main()
