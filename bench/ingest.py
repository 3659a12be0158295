"""Import throughput and memory: a generated trajectory file through the real import path
(in a child process, so its peak memory is its own), against a bare COPY of the same step
rows into an unindexed scratch table, in the same run.

The figure asked for is ``import_rate_over_copy_rate`` (bare COPY seconds / import
seconds). Beside it: the same rows COPYed into an empty table with the step table's
indexes (the server work no import can avoid), into the real ``trajectories_step`` (what
the indexes and foreign key cost on their own), into a TEMP table (no WAL), and the
CPU seconds of the importing process and of its PostgreSQL backend, which say more than
wall time on a shared, loaded machine.

    make bench
    .venv/bin/python bench/ingest.py --steps 1000000 --step-chars 300 --steps-per-trajectory 20
    .venv/bin/python bench/ingest.py --repeat 5   # the run with the median ratio, and all
    .venv/bin/python bench/ingest.py --format openai-messages --steps 100000
    .venv/bin/python bench/ingest.py --helper-sweep

``--helper-sweep`` times small files (0.5 to 16 MB) imported in-process and through
the helper process, interleaved, the median of five each: where the two cross is where
``trajectories.prepare.HELPER_FROM_BYTES`` belongs.

``--format openai-messages`` replicates the tau-bench file from ../shared/realdata until it
holds the requested number of messages. Prints one line per figure and a JSON line last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from trajectories.formats import parser_for  # noqa: E402
from trajectories.formats.base import ParsedTrajectory  # noqa: E402
from trajectories.hashing import prefix_hashes  # noqa: E402
from trajectories.pgcopy import STEP_COLUMNS, first_column_filled, step_rows  # noqa: E402
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
    """Runs in a fresh interpreter: import, report time, CPU and peak RSS, clean up."""
    _peak_rss_reset()
    _vacuum()
    project = project_create(slug=f"bench-{os.getpid()}-{int(time.time())}", name="bench")
    server = _backend_cpu_reader()
    try:
        server_start, client_start = server(), _own_cpu()
        start = time.perf_counter()
        batch = trajectory_import(project=project, source_format=source_format, path=path)
        seconds = time.perf_counter() - start
        client_cpu, server_cpu = _own_cpu() - client_start, server() - server_start
    finally:
        project_drop(project)
    peak_mb = _peak_rss_mb()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "steps": batch.step_count,
                "peak_rss_mb": peak_mb,
                "client_cpu_s": client_cpu,
                "server_cpu_s": server_cpu,
            }
        )
    )


def helper_sweep(repeat: int = 5) -> None:
    """In-process against helper-process preparation on small files (see the module
    docstring): one line per size and a JSON line last."""
    from trajectories import prepare

    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in (0.5, 1, 2, 4, 8, 16):
            path = Path(tmp) / f"{megabytes}.jsonl"
            steps = write_stepscope(path, int(megabytes * 1e6 / 352), 20, 300, seed=7)
            seconds: dict[str, list[float]] = {"in_process_s": [], "helper_s": []}
            for run in range(repeat):
                for mode, times in seconds.items():
                    prepare.HELPER_FROM_BYTES = 0 if mode == "helper_s" else 1 << 62
                    project = project_create(slug=f"bench-sweep-{os.getpid()}-{run}", name="b")
                    try:
                        start = time.perf_counter()
                        trajectory_import(project=project, source_format="stepscope", path=path)
                        times.append(time.perf_counter() - start)
                    finally:
                        project_drop(project)
            row: dict[str, Any] = {"file_mb": round(path.stat().st_size / 1e6, 1), "steps": steps}
            row.update(
                {mode: round(sorted(times)[repeat // 2], 3) for mode, times in seconds.items()}
            )
            figures.append(row)
            print(
                f"{row['file_mb']:5.1f} MB, {steps:,} steps:"
                f" in-process {row['in_process_s']:.3f} s, helper {row['helper_s']:.3f} s"
            )
    print(json.dumps({"helper_sweep": figures}))


def baselines(path: Path, source_format: str) -> dict[str, float]:
    """COPY the import's own step rows (same columns, same text) four ways, each timed
    alone after the rows are built: into an unindexed table of the same columns (the
    bare baseline), into an empty table with the step table's indexes (what the import
    cannot avoid), into an unindexed TEMP table (no WAL, for reference), and into the
    real ``trajectories_step`` with its indexes and foreign-key check (rolled back)."""
    rows, trajectory_ids = [], []
    next_id = 1
    for number, record in enumerate(parser_for(source_format)(path)):
        if not isinstance(record, ParsedTrajectory):
            continue
        hashes = prefix_hashes(record.task, record.steps)
        encoded = step_rows(record.steps, hashes).encode()
        lines = first_column_filled(encoded, number).decode().splitlines()
        step_ids = range(next_id, next_id + len(record.steps))
        next_id += len(record.steps)
        trajectory_ids.append(number)
        # The bare table has no column defaults, so the rows carry the ids the import's
        # rows get from trajectories_step's sequence.
        rows.append("".join(f"{i}\t{line}\n" for i, line in zip(step_ids, lines, strict=True)))
    figures: dict[str, float] = {"steps": next_id - 1}
    with connection.cursor() as wrapper:
        cursor = wrapper.cursor
        cursor.execute("CREATE TABLE bench_scratch_steps (LIKE trajectories_step)")
        try:
            server = _backend_cpu_reader()
            server_start = server()
            figures["bare_copy_s"] = _timed_copy(cursor, "bench_scratch_steps", rows)
            figures["bare_copy_server_cpu_s"] = server() - server_start
        finally:
            cursor.execute("DROP TABLE bench_scratch_steps")
        # The floor of what any import must make the server do for these rows: the
        # step table's own indexes, identity and checks (LIKE ... INCLUDING ALL takes
        # all but the foreign key), on an empty table.
        cursor.execute("CREATE TABLE bench_scratch_indexed (LIKE trajectories_step INCLUDING ALL)")
        try:
            server_start = server()
            figures["indexed_copy_s"] = _timed_copy(cursor, "bench_scratch_indexed", rows)
            figures["indexed_copy_server_cpu_s"] = server() - server_start
        finally:
            cursor.execute("DROP TABLE bench_scratch_indexed")
        cursor.execute("CREATE TEMP TABLE bench_scratch_temp (LIKE trajectories_step)")
        try:
            figures["temp_copy_s"] = _timed_copy(cursor, "bench_scratch_temp", rows)
        finally:
            cursor.execute("DROP TABLE bench_scratch_temp")
    figures["real_table_copy_s"] = _real_table_copy(rows, trajectory_ids)
    return figures


def _timed_copy(cursor: Any, table: str, rows: list[str]) -> float:
    _checkpoint()
    start = time.perf_counter()
    with cursor.copy(f"COPY {table} (id, {STEP_COLUMNS}) FROM STDIN") as copy:
        for first in range(0, len(rows), 500):
            copy.write("".join(rows[first : first + 500]))
    return time.perf_counter() - start


def _real_table_copy(rows: list[str], trajectory_ids: list[int]) -> float:
    """COPY into trajectories_step as an import without the FK shortcut would: every
    index maintained and the deferred foreign-key check run; then rolled back. The
    trajectories the steps point at are written first, untimed."""
    _vacuum()
    project = project_create(slug=f"bench-copy-{os.getpid()}-{int(time.time())}", name="bench")
    try:
        with transaction.atomic(), connection.cursor() as wrapper:
            cursor = wrapper.cursor
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence('trajectories_trajectory', 'id'))"
                " FROM generate_series(1, %s)",
                [len(trajectory_ids)],
            )
            real = {n: row[0] for n, row in zip(trajectory_ids, cursor.fetchall(), strict=True)}
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence('trajectories_step', 'id'))"
                " FROM generate_series(1, %s)",
                [sum(row.count("\n") for row in rows)],
            )
            step_ids = iter([row[0] for row in cursor.fetchall()])
            cursor.execute(
                "INSERT INTO trajectories_trajectory (id, project_id, external_id, source_format,"
                " task_key, task, ground_truth, model_name, metadata, step_count, content_hash,"
                " created_at) SELECT id, %s, id::text, 'bench', '', '', '', '', '{}', 0, id::text,"
                " now() FROM unnest(%s::bigint[]) AS id",
                [project.pk, list(real.values())],
            )
            # The same rows with real trajectory ids and fresh step ids.
            real_rows = [_renumber(row, real, step_ids) for row in rows]
            start = time.perf_counter()
            with cursor.copy(f"COPY trajectories_step (id, {STEP_COLUMNS}) FROM STDIN") as copy:
                for first in range(0, len(real_rows), 500):
                    copy.write("".join(real_rows[first : first + 500]))
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # runs the deferred FK checks
            seconds = time.perf_counter() - start
            transaction.set_rollback(True)
    finally:
        project.delete()
    return seconds


def _renumber(block: str, trajectories: dict[int, int], step_ids: Iterator[int]) -> str:
    lines = []
    for line in block.splitlines(keepends=True):
        _, trajectory, rest = line.split("\t", 2)
        lines.append(f"{next(step_ids)}\t{trajectories[int(trajectory)]}\t{rest}")
    return "".join(lines)


def _vacuum() -> None:
    """Clear the dead rows earlier runs left (deleted or rolled back), so that each
    measurement starts from the same tables rather than one bloated by the last; then
    settle the server (:func:`_checkpoint`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "VACUUM trajectories_step, trajectories_trajectory, trajectories_trajectorysource,"
            " labeling_steplabel"
        )
    _checkpoint()


def _checkpoint() -> None:
    """Write out what earlier work left dirty, so that a measurement neither pays for
    it nor meets a timed checkpoint halfway (where the role may: superusers)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser') = 'on'")
        if cursor.fetchone()[0]:
            cursor.execute("CHECKPOINT")


def _peak_rss_reset() -> None:
    """Forget the peak RSS so far. A process started by fork and exec keeps the peak it
    had before exec, which is the parent's: after the baselines of a --repeat run that
    was hundreds of megabytes the import never used."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak_rss_mb() -> float:
    """Peak RSS since :func:`_peak_rss_reset` (VmHWM), or getrusage's where /proc has none."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _backend_cpu_reader() -> Callable[[], float]:
    """CPU seconds used so far by this connection's PostgreSQL backend, read from /proc
    (the embedded server runs on this machine); NaN where it cannot be read."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    stat = Path(f"/proc/{pid}/stat")
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / ticks

    return read


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--step-chars", type=int, default=300)
    parser.add_argument("--format", default="stepscope", choices=["stepscope", "openai-messages"])
    parser.add_argument(
        "--repeat", type=int, default=1, help="import and baselines this many times, in turn"
    )
    parser.add_argument(
        "--helper-sweep", action="store_true", help="small files: in-process against helper"
    )
    parser.add_argument("--child-import", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_import:
        child_import(args.child_import, args.format)
        return
    if args.helper_sweep:
        helper_sweep()
        return

    seed = int(time.time())
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("bench.jsonl" if args.format == "stepscope" else "bench.json")
        if args.format == "stepscope":
            steps = write_stepscope(
                path, args.steps, args.steps_per_trajectory, args.step_chars, seed
            )
        else:
            steps = write_openai_messages(path, args.steps, seed)
        size_mb = path.stat().st_size / 1e6
        print(f"{args.format}: {steps:,} steps, {size_mb:,.1f} MB, load {os.getloadavg()[0]:.1f}")
        for _ in range(args.repeat):
            figures = one_run(path, args.format, steps)
            figures["file_mb"] = round(size_mb, 1)
            runs.append(figures)
            print(json.dumps(figures))

    # On a shared machine the speed of both sides drifts from run to run; the run with
    # the median ratio is the one reported, with every run's ratio beside it.
    ranked = sorted(runs, key=lambda run: run["import_rate_over_copy_rate"])
    median = ranked[(len(ranked) - 1) // 2]  # the lower one of an even count
    print_figures(median)
    summary = dict(median, runs=len(runs))
    summary["ratios"] = [run["import_rate_over_copy_rate"] for run in runs]
    print(json.dumps(summary))


def one_run(path: Path, source_format: str, steps: int) -> dict[str, Any]:
    """The import in a fresh interpreter, then the baselines on the same rows."""
    child = subprocess.run(
        [sys.executable, __file__, "--format", source_format, "--child-import", str(path)],
        capture_output=True,
        text=True,
    )
    if child.returncode != 0:
        sys.exit(f"the import failed:\n{child.stderr[-3000:]}")
    result = json.loads(child.stdout.strip().splitlines()[-1])
    copies = baselines(path, source_format)
    import_s = result["seconds"]
    assert result["steps"] == steps == copies["steps"], (result, steps, copies)
    bare_s, real_s = copies["bare_copy_s"], copies["real_table_copy_s"]
    return {
        "format": source_format,
        "steps": steps,
        "import_s": round(import_s, 2),
        "import_steps_per_s": round(steps / import_s),
        "import_peak_rss_mb": round(result["peak_rss_mb"]),
        "import_client_cpu_s": round(result["client_cpu_s"], 2),
        "import_server_cpu_s": round(result["server_cpu_s"], 2),
        "bare_copy_s": round(bare_s, 2),
        "bare_copy_steps_per_s": round(steps / bare_s),
        "bare_copy_server_cpu_s": round(copies["bare_copy_server_cpu_s"], 2),
        "indexed_copy_s": round(copies["indexed_copy_s"], 2),
        "indexed_copy_server_cpu_s": round(copies["indexed_copy_server_cpu_s"], 2),
        "temp_table_copy_s": round(copies["temp_copy_s"], 2),
        "real_table_copy_s": round(real_s, 2),
        "import_rate_over_copy_rate": round(bare_s / import_s, 3),
        "import_rate_over_real_table_copy_rate": round(real_s / import_s, 3),
        "import_rate_over_indexed_copy_rate": round(copies["indexed_copy_s"] / import_s, 3),
        "indexed_copy_rate_over_copy_rate": round(bare_s / copies["indexed_copy_s"], 3),
        "load_average": round(os.getloadavg()[0], 1),
    }


def print_figures(run: dict[str, Any]) -> None:
    steps, import_s, bare_s = run["steps"], run["import_s"], run["bare_copy_s"]
    print(f"import (parse, hash, dedupe, COPY): {import_s:.2f} s, {steps / import_s:,.0f} steps/s")
    print(f"  peak RSS of the importing process: {run['import_peak_rss_mb']:,} MB")
    print(
        f"  CPU: importing process {run['import_client_cpu_s']:.2f} s,"
        f" its PostgreSQL backend {run['import_server_cpu_s']:.2f} s"
    )
    print(f"bare COPY of the same step rows:    {bare_s:.2f} s, {steps / bare_s:,.0f} steps/s")
    print(f"  CPU of its PostgreSQL backend:    {run['bare_copy_server_cpu_s']:.2f} s")
    print(
        f"  into a table with its indexes:    {run['indexed_copy_s']:.2f} s"
        f" (server CPU {run['indexed_copy_server_cpu_s']:.2f} s;"
        f" rate / bare {run['indexed_copy_rate_over_copy_rate']:.3f})"
    )
    print(f"  the same into a TEMP table:       {run['temp_table_copy_s']:.2f} s (no WAL)")
    print(f"  the same into trajectories_step:  {run['real_table_copy_s']:.2f} s (FK checked)")
    print(f"import rate / bare COPY rate:       {run['import_rate_over_copy_rate']:.3f}")
    print(f"import rate / real-table COPY rate: {run['import_rate_over_real_table_copy_rate']:.3f}")
    print(f"import rate / indexed COPY rate:    {run['import_rate_over_indexed_copy_rate']:.3f}")


if __name__ == "__main__":
    main()
