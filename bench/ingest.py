"""Import throughput and memory: a generated trajectory file through the real import path
(in a child process, so its peak memory is its own), against a bare COPY of the same step
rows into an unindexed scratch table, in the same run.

    make bench
    .venv/bin/python bench/ingest.py --steps 1000000 --step-chars 300 --steps-per-trajectory 20
    .venv/bin/python bench/ingest.py --format openai-messages --steps 100000

``--format openai-messages`` replicates the tau-bench file from ../shared/realdata until it
holds the requested number of messages. Prints one line per figure and a JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

from trajectories.formats import parser_for  # noqa: E402
from trajectories.formats.base import ParsedTrajectory  # noqa: E402
from trajectories.hashing import prefix_hashes  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.pgcopy import json_text, text  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

TAU_BENCH = REPO.parent / "shared" / "realdata" / "tau_bench" / "gpt-4o-airline.json"
WORDS = tuple(
    [
        "we",
        "compute",
        "the",
        "total",
        "then",
        "subtract",
        "the",
        "remaining",
        "amount",
        "so",
        "each",
        "part",
        "gives",
        "therefore",
        "next",
        "step",
        "check",
        "value",
        "answer",
        "equals",
        "times",
        "plus",
        "minus",
        "half",
    ]
)


def write_stepscope(path: Path, steps: int, per_trajectory: int, chars: int, seed: int) -> int:
    rng = random.Random(seed)
    written = 0
    with path.open("w", encoding="utf-8") as out:
        number = 0
        while written < steps:
            count = min(per_trajectory, steps - written)
            record = {
                "id": f"bench-{seed}-{number}",
                "task": f"Task {number % 5000}: " + _text(rng, chars // 2),
                "task_key": f"task-{number % 5000}",
                "outcome": {"reward": float(number % 2), "success": number % 2 == 1},
                "steps": [{"kind": "thought", "content": _text(rng, chars)} for _ in range(count)],
            }
            out.write(json.dumps(record) + "\n")
            written += count
            number += 1
    return written


def write_openai_messages(path: Path, messages: int, seed: int) -> int:
    runs = json.loads(TAU_BENCH.read_text())
    out_runs: list[dict[str, Any]] = []
    written = 0
    copy = 0
    while written < messages:
        for run in runs:
            if written >= messages:
                break
            clone = dict(run, task_id=f"{seed}-{copy}-{run['task_id']}")
            out_runs.append(clone)
            written += len(run["traj"])
        copy += 1
    path.write_text(json.dumps(out_runs))
    return written


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def child_import(path: Path, source_format: str) -> None:
    """Runs in a fresh interpreter: import, report time and peak RSS, clean up."""
    project = project_create(slug=f"bench-{os.getpid()}-{int(time.time())}", name="bench")
    try:
        start = time.perf_counter()
        batch = trajectory_import(project=project, source_format=source_format, path=path)
        seconds = time.perf_counter() - start
    finally:
        _drop_project(project)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "steps": batch.step_count, "peak_rss_mb": peak_mb}))


def bare_copy(path: Path, source_format: str) -> tuple[float, float, int]:
    """Parse + hash time, then the time of a bare COPY of the same step rows."""
    start = time.perf_counter()
    rows = []
    for number, record in enumerate(parser_for(source_format)(path)):
        if not isinstance(record, ParsedTrajectory):
            continue
        hashes = prefix_hashes(record.task, record.steps)
        for index, (step, prefix) in enumerate(zip(record.steps, hashes, strict=True)):
            rows.append(
                f"{number}\t{index}\t{text(step.kind)}\t{text(step.role)}\t{text(step.agent)}"
                f"\t{text(step.content)}\t{text(step.tool_name)}\t{json_text(step.tool_args)}"
                f"\t{json_text(step.metadata)}\t{'t' if step.labelable else 'f'}\t{prefix}\n"
            )
    parse_s = time.perf_counter() - start
    with connection.cursor() as wrapper:
        wrapper.execute(
            "CREATE TABLE bench_scratch_steps (trajectory integer, index integer, kind text,"
            " role text, agent text, content text, tool_name text, tool_args jsonb,"
            " metadata jsonb, labelable boolean, prefix_hash text)"
        )
        try:
            start = time.perf_counter()
            with wrapper.cursor.copy("COPY bench_scratch_steps FROM STDIN") as copy:
                for first in range(0, len(rows), 5000):
                    copy.write("".join(rows[first : first + 5000]))
            copy_s = time.perf_counter() - start
        finally:
            wrapper.execute("DROP TABLE bench_scratch_steps")
    return parse_s, copy_s, len(rows)


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--step-chars", type=int, default=300)
    parser.add_argument("--format", default="stepscope", choices=["stepscope", "openai-messages"])
    parser.add_argument("--child-import", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_import:
        child_import(args.child_import, args.format)
        return

    seed = int(time.time())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("bench.jsonl" if args.format == "stepscope" else "bench.json")
        if args.format == "stepscope":
            steps = write_stepscope(
                path, args.steps, args.steps_per_trajectory, args.step_chars, seed
            )
        else:
            steps = write_openai_messages(path, args.steps, seed)
        size_mb = path.stat().st_size / 1e6
        print(f"{args.format}: {steps:,} steps, {size_mb:,.1f} MB")

        child = subprocess.run(
            [sys.executable, __file__, "--format", args.format, "--child-import", str(path)],
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            sys.exit(f"the import failed:\n{child.stderr[-3000:]}")
        result = json.loads(child.stdout.strip().splitlines()[-1])
        parse_s, copy_s, rows = bare_copy(path, args.format)

    import_s = result["seconds"]
    assert result["steps"] == steps == rows, (result, steps, rows)
    figures = {
        "format": args.format,
        "steps": steps,
        "file_mb": round(size_mb, 1),
        "import_s": round(import_s, 2),
        "import_steps_per_s": round(steps / import_s),
        "import_peak_rss_mb": round(result["peak_rss_mb"]),
        "parse_and_hash_s": round(parse_s, 2),
        "bare_copy_s": round(copy_s, 2),
        "bare_copy_steps_per_s": round(steps / copy_s),
        "import_rate_over_copy_rate": round(copy_s / import_s, 3),
    }
    print(f"import (parse, hash, dedupe, COPY): {import_s:.2f} s, {steps / import_s:,.0f} steps/s")
    print(f"  peak RSS of the importing process: {result['peak_rss_mb']:,.0f} MB")
    print(f"  parse + hash alone:                {parse_s:.2f} s")
    print(f"bare COPY of the same step rows:    {copy_s:.2f} s, {steps / copy_s:,.0f} steps/s")
    print(f"import rate / bare COPY rate:       {copy_s / import_s:.3f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
