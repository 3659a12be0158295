"""Credit attribution over a million stored steps: the whole run against the maths alone.

    .venv/bin/python bench/attribution.py                      # 1,000,000 steps
    .venv/bin/python bench/attribution.py --steps 100000 --repeat 1

Data: generated Stepscope JSONL, imported through ``trajectory_import`` into a throwaway
project that is dropped at the end. Each task has ``--rollouts`` rollouts of
``--steps-per-trajectory`` steps that share a random-length prefix with the task's first
rollout (so their prefix hashes merge into a real prefix tree), with a success rate that
falls the earlier a rollout leaves that prefix. Every step gets a score from an external
scorer, written straight into the table (setup, not timed).

For ``returns`` (the scorer's values as step rewards), ``gae``, ``prm-delta``,
``group-relative`` and ``mc-prefix`` it times:

* the whole run as a worker does it (``attribution_run_plan`` and ``attribution_chunk_run``
  in this process, no broker round trip): select and count the steps, read them with a
  binary ``COPY``, compute, replace the run's credits with a binary ``COPY`` and commit;
* inside it, the read, the maths and the write, as the run records them;
* the maths alone again, on the same arrays already in memory (best of ``--repeat``).

Prints one line per method and a JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django

django.setup()

from django.db import connection  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from scoring import methods, prm, services, tasks  # noqa: E402
from scoring.models import AttributionRun, Scorer  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

METHODS: tuple[tuple[str, bool, dict[str, Any]], ...] = (
    # (method, uses the scorer, parameters)
    ("returns", True, {"gamma": 0.99}),
    ("gae", True, {"gamma": 0.99, "lam": 0.95}),
    ("prm-delta", True, {}),
    ("group-relative", False, {}),
    ("mc-prefix", False, {}),
)
WORDS = ("add", "carry", "the", "total", "so", "we", "get", "check", "half", "times", "then")


def write_rollouts(path: Path, steps: int, per_trajectory: int, rollouts: int, seed: int) -> int:
    """Tasks of ``rollouts`` rollouts each, sharing prefixes; returns the steps written."""
    rng = random.Random(seed)
    written = 0
    task = 0
    with path.open("w", encoding="utf-8") as out:
        while written < steps:
            base = [_sentence(rng, task, i) for i in range(per_trajectory)]
            for rollout in range(rollouts):
                if written >= steps:
                    break
                count = min(per_trajectory, steps - written)
                shared = count if rollout == 0 else rng.randrange(count)
                contents = base[:shared] + [
                    _sentence(rng, task, i, rollout) for i in range(shared, count)
                ]
                success = rng.random() < 0.15 + 0.8 * shared / per_trajectory
                record = {
                    "id": f"bench-{seed}-{task}-{rollout}",
                    "task": f"Task {task} of seed {seed}: what is the total?",
                    "task_key": f"task-{task}",
                    "outcome": {"reward": float(success), "success": success},
                    "steps": [{"kind": "thought", "content": c} for c in contents],
                }
                out.write(json.dumps(record) + "\n")
                written += count
            task += 1
    return written


def _sentence(rng: random.Random, task: int, index: int, rollout: int = 0) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(8))
    return f"Step {index} ({task}.{rollout}): {words}."


def add_scores(project: Project) -> Scorer:
    scorer = Scorer.objects.create(
        project=project, name="bench", kind=prm.EXTERNAL, queue="default"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scoring_stepscore (step_id, scorer_id, value, raw, updated_at)"
            " SELECT s.id, %s, random(), '{}', now() FROM trajectories_step s"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id WHERE t.project_id = %s",
            [scorer.pk, project.pk],
        )
        cursor.execute("ANALYZE scoring_stepscore")
        cursor.execute("ANALYZE trajectories_step")
    return scorer


def run_whole(
    project: Project, method: str, scorer: Scorer | None, params: dict[str, Any]
) -> tuple[AttributionRun, float]:
    """Start, plan and run the one chunk in this process, timed end to end."""
    queued: list[int] = []
    originals = (tasks.attribution_plan.apply_async, tasks.attribution_chunk.apply_async)
    tasks.attribution_plan.apply_async = lambda args, **_: queued.append(args[0])
    tasks.attribution_chunk.apply_async = lambda args, **_: queued.append(args[0])
    try:
        start = time.perf_counter()
        run = services.attribution_run_start(
            project=project, method=method, scorer=scorer, parameters=params
        )
        services.attribution_run_plan(run_id=run.pk)
        for chunk_id in run.chunks.values_list("pk", flat=True):
            services.attribution_chunk_run(chunk_id=chunk_id)
        seconds = time.perf_counter() - start
    finally:
        tasks.attribution_plan.apply_async, tasks.attribution_chunk.apply_async = originals
    run.refresh_from_db()
    if run.status != AttributionRun.Status.DONE:
        raise RuntimeError(f"{method} run ended {run.status}: {run.error}")
    return run, seconds


def maths_alone(run: AttributionRun, repeat: int) -> float:
    steps, trajectories = services.read_tables(run)
    rewards = "scorer" if run.method == "returns" else "none"
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        methods.compute(run.method, run.parameters, steps, trajectories, rewards=rewards)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per task")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the maths alone")
    args = parser.parse_args()

    seed = int(time.time())
    project = project_create(slug=f"bench-attribution-{os.getpid()}", name="bench attribution")
    figures: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "rollouts.jsonl"
            write_rollouts(path, args.steps, args.steps_per_trajectory, args.rollouts, seed)
            start = time.perf_counter()
            batch = trajectory_import(project=project, source_format="stepscope", path=path)
            import_s = time.perf_counter() - start
        scorer = add_scores(project)
        steps = batch.step_count
        print(
            f"{steps:,} steps in {batch.created_count:,} trajectories"
            f" ({args.rollouts} rollouts a task), imported in {import_s:.1f} s (setup)"
        )
        print(
            f"{'method':<15} {'whole run':>10} {'read':>7} {'maths':>7} {'write':>7}"
            f" {'maths alone':>12} {'steps/s (whole)':>16}"
        )
        for method, uses_scorer, params in METHODS:
            run, whole = run_whole(project, method, scorer if uses_scorer else None, params)
            alone = maths_alone(run, args.repeat)
            m = run.metrics
            figures[method] = {
                "credited_steps": run.done,
                "whole_run_s": round(whole, 3),
                "read_s": m["read_s"],
                "maths_s": m["math_s"],
                "write_s": m["write_s"],
                "maths_alone_s": round(alone, 3),
                "steps_per_s": round(run.done / whole),
            }
            print(
                f"{method:<15} {whole:>9.2f}s {m['read_s']:>6.2f}s {m['math_s']:>6.2f}s"
                f" {m['write_s']:>6.2f}s {alone:>11.3f}s {run.done / whole:>16,.0f}"
            )
    finally:
        project_drop(project)
    print(json.dumps({"steps": steps, "methods": figures}))


if __name__ == "__main__":
    main()
