"""Compare speed: model against human step labels over a million labelled and scored steps.

    .venv/bin/python bench/compare.py                       # 1,000,000 steps, 20 per trajectory
    .venv/bin/python bench/compare.py --steps 200000 --repeat 5

Writes a throwaway project (``bench-compare-<time>``) with ``COPY``, as the importer does:
trajectories, steps, one human label on every step (a few trajectories labelled by three
annotators, so the majority has something to decide), and one scorer's score on every
step. Then it times what ``python manage.py compare --project SLUG --scorer NAME --json``
computes (model against ``human:majority``: confusion, kappa, AUROC, calibration,
first-error F1 and its threshold sweep, outcome against process), and the agreement
between the humans on its own. Prints one line per figure and a JSON line last. The
project, its rows and the bench users are dropped at the end, also when a step fails.

The baseline, in the same run: the same comparison with the majority counted from the
labels at query time (as before ``labeling_stepmajority`` kept it per step), with the
same results checked, and the ratio of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from evaluation.compare import (  # noqa: E402
    CompareQuery,
    CompareResult,
    big_joins,
    compare_run,
    human_agreement,
)
from labeling import sources  # noqa: E402
from labeling.models import LabelSchema  # noqa: E402
from labeling.sources import SchemaScope, label_source_parse, label_source_sql  # noqa: E402
from scoring import prm  # noqa: E402
from scoring.models import Scorer  # noqa: E402
from trajectories.models import Project, Step, Trajectory  # noqa: E402
from trajectories.services import project_create  # noqa: E402

MODELS = ("policy-a", "policy-b", "policy-c", "policy-d")
TASK_SETS = ("gsm8k", "math", "aime")
TOOLS = ("python", "search", "calculator")
ANNOTATORS = 3
# Share of trajectories that all three annotators label (the rest get one label a step).
OVERLAP = 0.05


def _copy(table_and_columns: str, lines: list[str]) -> None:
    with (
        connection.cursor() as wrapper,
        wrapper.cursor.copy(f"COPY {table_and_columns} FROM STDIN") as copy,
    ):
        for first in range(0, len(lines), 20_000):
            copy.write("".join(lines[first : first + 20_000]))


def _ids(table: str, count: int) -> np.ndarray:
    """``count`` ids from the table's identity sequence (as the importer takes them)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
            [table, count],
        )
        return np.array([row[0] for row in cursor.fetchall()], dtype=np.int64)


def generate(
    project: Project, users: list[User], scorer: Scorer, steps: int, per: int, seed: int
) -> int:
    """Write the rows; returns the number of labelled and scored steps."""
    rng = np.random.default_rng(seed)
    n_traj = steps // per
    total = n_traj * per
    schema = LabelSchema.objects.get(project=project)
    now = timezone.now().isoformat()

    # A first error for 60% of the trajectories; a rollout succeeds when it has none
    # (with some noise, so outcome and process disagree now and then).
    first_error = np.where(rng.random(n_traj) < 0.6, rng.integers(0, per, n_traj), -1)
    success = (first_error < 0) ^ (rng.random(n_traj) < 0.1)
    traj_ids = _ids(Trajectory._meta.db_table, n_traj)
    trajectory_lines = [
        f"{tid}\t{project.pk}\tbench-{seed}-{i}\tstepscope\t{TASK_SETS[i % 3]}-{i % 5000}"
        f"\tTask {i % 5000}\t\t{MODELS[i % 4]}\t{1.0 if ok else 0.0}\t{'t' if ok else 'f'}"
        f"\t{{}}\t{per}\t{seed:016x}{i:048x}\t{now}\n"
        for i, (tid, ok) in enumerate(zip(traj_ids.tolist(), success.tolist(), strict=True))
    ]
    _copy(
        "trajectories_trajectory (id, project_id, external_id, source_format, task_key, task,"
        " ground_truth, model_name, outcome_reward, success, metadata, step_count,"
        " content_hash, created_at)",
        trajectory_lines,
    )

    step_ids = _ids(Step._meta.db_table, total)
    owner = np.repeat(np.arange(n_traj), per)
    index = np.tile(np.arange(per), n_traj)
    error_at = first_error[owner]
    # Before the first error good (a few neutral), at it bad, after it mostly bad.
    label = np.ones(total, dtype=np.int64)
    label[rng.random(total) < 0.05] = 0
    after = (error_at >= 0) & (index > error_at)
    label[after] = rng.choice([-1, -1, 0, 1], size=int(after.sum()))
    label[(error_at >= 0) & (index == error_at)] = -1
    kind = np.where(index % 4 == 3, 1, 0)  # every fourth step a tool call
    step_lines = [
        f"{sid}\t{traj_ids[t]}\t{i}\t{'tool_call' if k else 'thought'}\tassistant\t"
        f"\tstep {i}\t{TOOLS[t % 3] if k else ''}\t\\N\t{{}}\tt\t{sid:064x}\n"
        for sid, t, i, k in zip(
            step_ids.tolist(), owner.tolist(), index.tolist(), kind.tolist(), strict=True
        )
    ]
    _copy(
        "trajectories_step (id, trajectory_id, index, kind, role, agent, content, tool_name,"
        " tool_args, metadata, labelable, prefix_hash)",
        step_lines,
    )

    annotator = owner % ANNOTATORS
    overlap = rng.random(n_traj) < OVERLAP
    label_lines: list[str] = []
    submitted = "submitted"
    for extra in range(ANNOTATORS):
        if extra == 0:
            chosen = np.arange(total)
            who = annotator
            values = label
        else:
            chosen = np.flatnonzero(overlap[owner])
            who = (annotator[chosen] + extra) % ANNOTATORS
            # A second opinion agrees nine times out of ten.
            values = np.where(
                rng.random(chosen.size) < 0.9, label[chosen], rng.choice([-1, 0, 1], chosen.size)
            )
        user_ids = np.array([u.pk for u in users])[who]
        label_lines.extend(
            f"{sid}\t{uid}\t{schema.pk}\t{v}\t[]\t\t{submitted}\tf\t{now}\t{now}\n"
            for sid, uid, v in zip(
                step_ids[chosen].tolist(), user_ids.tolist(), values.tolist(), strict=True
            )
        )
    _copy(
        "labeling_steplabel (step_id, annotator_id, schema_id, value, tags, rationale, status,"
        " saw_model_scores, created_at, updated_at)",
        label_lines,
    )

    good = rng.beta(5, 2, total)
    bad = rng.beta(2, 5, total)
    score = np.where(label == 1, good, np.where(label == -1, bad, rng.random(total)))
    score_lines = [
        f"{sid}\t{scorer.pk}\t{value!r}\t{{}}\t{now}\n"
        for sid, value in zip(step_ids.tolist(), np.round(score, 6).tolist(), strict=True)
    ]
    _copy("scoring_stepscore (step_id, scorer_id, value, raw, updated_at)", score_lines)
    with connection.cursor() as cursor:
        for table in ("trajectories_trajectory", "trajectories_step"):
            cursor.execute(f"ANALYZE {table}")
        cursor.execute("ANALYZE labeling_steplabel")
        # Filled by the label triggers: without its statistics the planner takes the
        # majority for empty until autovacuum comes round (a minute), and the export
        # preview took 2.5 s instead of 0.45.
        cursor.execute("ANALYZE labeling_stepmajority")
        cursor.execute("ANALYZE scoring_stepscore")
    return total


def drop(project: Project, users: list[User]) -> None:
    """Remove the bench rows with plain SQL (the ORM's cascade would load them all)."""
    trajectories = "SELECT id FROM trajectories_trajectory WHERE project_id = %s"
    steps = f"SELECT id FROM trajectories_step WHERE trajectory_id IN ({trajectories})"
    with transaction.atomic(), connection.cursor() as cursor:
        # The label history triggers record the labels' deletion too: events go last.
        for statement in (
            f"DELETE FROM scoring_stepscore WHERE step_id IN ({steps})",
            f"DELETE FROM labeling_steplabel WHERE step_id IN ({steps})",
            f"DELETE FROM labeling_steplabelevent WHERE step_id IN ({steps})",
            f"DELETE FROM trajectories_step WHERE trajectory_id IN ({trajectories})",
            "DELETE FROM trajectories_trajectory WHERE project_id = %s",
        ):
            cursor.execute(statement, [project.pk])
        Scorer.objects.filter(project=project).delete()
        project.delete()
        User.objects.filter(pk__in=[u.pk for u in users]).delete()


def _backend_cpu() -> float | None:
    """CPU seconds the database backend serving this connection has used, when it runs
    on this machine (the embedded PostgreSQL); None otherwise."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone() or (0,)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def counted_majority_sql(project: Project, scope: SchemaScope) -> tuple[str, list[Any]]:
    """The baseline: ``human:majority`` counted from the submitted human labels at query
    time, one ``mode()`` aggregate per step (what labeling/sources.py did before the
    majority was kept per step), under the scope's schema versions."""
    return (
        "SELECT l.step_id, mode() WITHIN GROUP (ORDER BY l.value) AS value"
        " FROM labeling_steplabel l"
        " JOIN auth_user u ON u.id = l.annotator_id"
        " JOIN trajectories_step s ON s.id = l.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE t.project_id = %s AND l.status = 'submitted' AND l.schema_id = ANY(%s)"
        "   AND u.username NOT LIKE 'import:%%'"
        " GROUP BY l.step_id"
        " HAVING mode() WITHIN GROUP (ORDER BY l.value)"
        "    = mode() WITHIN GROUP (ORDER BY l.value DESC)",
        [project.pk, list(scope.ids)],
    )


@contextmanager
def majority_counted() -> Iterator[None]:
    """Resolve ``human:majority`` by counting, for the baseline runs."""
    kept = sources._majority_sql
    sources._majority_sql = counted_majority_sql
    try:
        yield
    finally:
        sources._majority_sql = kept


def _timed(query: CompareQuery, repeat: int) -> tuple[list[float], list[float], CompareResult]:
    """Wall-clock and CPU seconds (Python and the PostgreSQL backend) of ``repeat`` runs."""
    timings, cpu = [], []
    result = None
    for _ in range(repeat):
        backend, own = _backend_cpu(), time.process_time()
        start = time.perf_counter()
        result = compare_run(query)
        timings.append(time.perf_counter() - start)
        after = _backend_cpu()
        if backend is not None and after is not None:
            cpu.append(after - backend + time.process_time() - own)
    assert result is not None
    return timings, cpu, result


def _time_source(project: Project) -> float:
    """How long PostgreSQL takes to resolve the majority labels on their own."""
    sql, params = label_source_sql(project, label_source_parse("human:majority"))
    with transaction.atomic():
        big_joins(project)
        with connection.cursor() as cursor:
            start = time.perf_counter()
            cursor.execute(f"SELECT count(*) FROM ({sql}) r", params)
            cursor.fetchone()
            return time.perf_counter() - start


def _comparable(result: CompareResult) -> dict[str, Any]:
    data = result.as_json()
    data.pop("seconds")
    return data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs (the median counts)")
    parser.add_argument("--keep", action="store_true", help="keep the project for a look")
    args = parser.parse_args()

    seed = int(time.time())
    slug = f"bench-compare-{seed}"
    project = project_create(slug=slug, name="bench compare")
    users = [User.objects.create(username=f"{slug}-ann{i}") for i in range(ANNOTATORS)]
    scorer = Scorer.objects.create(project=project, name="bench-prm", kind=prm.EXTERNAL)
    try:
        start = time.perf_counter()
        with transaction.atomic():
            steps = generate(project, users, scorer, args.steps, args.steps_per_trajectory, seed)
        write_s = time.perf_counter() - start
        print(f"wrote {steps:,} labelled and scored steps in {write_s:.1f} s ({slug})")

        query = CompareQuery(
            project=project, scorer=scorer, source=label_source_parse("human:majority")
        )
        # Kept and counted runs alternate, so both see the same load on the machine.
        timings, cpu, counted_timings, counted_cpu = [], [], [], []
        result = counted = None
        for _ in range(args.repeat):
            wall, used, result = _timed(query, 1)
            timings += wall
            cpu += used
            with majority_counted():
                wall, used, counted = _timed(query, 1)
            counted_timings += wall
            counted_cpu += used
        assert result is not None and counted is not None
        same = json.dumps(_comparable(result)) == json.dumps(_comparable(counted))
        compare_s = statistics.median(timings)
        cpu_s = statistics.median(cpu) if cpu else None
        counted_s = statistics.median(counted_timings)
        counted_cpu_s = statistics.median(counted_cpu) if counted_cpu else None
        source_s = _time_source(project)
        with majority_counted():
            counted_source_s = _time_source(project)
        start = time.perf_counter()
        humans = human_agreement(project)
        humans_s = time.perf_counter() - start
        load = os.getloadavg()[0]

        command = f"python manage.py compare --project {slug} --scorer {scorer.name} --json"
        figures = {
            "steps": result.steps,
            "trajectories": result.trajectories,
            "compare_s": round(compare_s, 3),
            "compare_runs_s": [round(t, 3) for t in timings],
            "compare_cpu_s": round(cpu_s, 3) if cpu_s is not None else None,
            "baseline_counted_s": round(counted_s, 3),
            "baseline_counted_runs_s": [round(t, 3) for t in counted_timings],
            "baseline_counted_cpu_s": round(counted_cpu_s, 3) if counted_cpu_s else None,
            "speedup": round(counted_s / compare_s, 2),
            "same_results": same,
            "majority_labels_s": round(source_s, 3),
            "majority_counted_s": round(counted_source_s, 3),
            "humans_s": round(humans_s, 3),
            "load_average": round(load, 2),
            "kappa": round(result.kappa, 4),
            "auroc": round(result.auroc, 4),
            "first_error_f1": round(result.first_error.f1, 4),
            "command": command,
        }
        runs = ", ".join(f"{t:.2f}" for t in timings)
        print(
            f"compare over {result.steps:,} steps in {result.trajectories:,} trajectories:"
            f" {compare_s:.2f} s (median of {runs})"
        )
        if cpu_s is not None:
            print(f"  CPU time, Python and PostgreSQL together: {cpu_s:.2f} s")
        runs = ", ".join(f"{t:.2f}" for t in counted_timings)
        print(
            f"baseline, majority counted at query time: {counted_s:.2f} s (median of {runs})"
            + (f", CPU {counted_cpu_s:.2f} s" if counted_cpu_s is not None else "")
        )
        print(
            f"  kept / counted: {compare_s / counted_s:.2f} of the time;"
            f" results {'identical' if same else 'DIFFERENT'}"
        )
        print(
            f"  resolving human:majority alone: {source_s:.2f} s kept,"
            f" {counted_source_s:.2f} s counted"
        )
        print(
            f"  kappa {result.kappa:.3f}, AUROC {result.auroc:.3f},"
            f" first-error F1 {result.first_error.f1:.3f}"
        )
        print(f"between humans ({humans.labels:,} labels): {humans_s:.2f} s")
        print(f"load average when done: {load:.2f} (other figures are wall-clock seconds)")
        print(f"the same through the command: {command}")
        print(json.dumps(figures))
    finally:
        if args.keep:
            print(f"kept project {slug}")
        else:
            drop(project, users)


if __name__ == "__main__":
    main()
