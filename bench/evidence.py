"""What each part of the trajectory page's score/credit evidence costs on a long
trajectory against a short one (#37): ``GET /t/<id>/evidence/?part=top`` (strips, first
errors, pickers), ``?part=columns&from=&to=`` for 200 steps, ``?part=step&step=`` and
the page without HTMX (the first page of the evidence table); with ``--credits``, also
an export of a 10,000-step saved selection with a credit run's credits.

    createdb -h 127.0.0.1 -U postgres evidencebench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/evidencebench .venv/bin/python manage.py migrate
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/evidencebench \\
        .venv/bin/python bench/evidence.py --steps 100000 1000 --repeat 5

Builds (once; later runs reuse it) a project ``bench-evidence`` with one trajectory per
``--steps`` through ``trajectory_records_import``, and two external scorers with a score
on every step (the first under 0.5 at 70% of the way, so the PRM flags a late first
error). Requests go through Django's test client in this process (the view, its queries
and its template; no web server). Prints the command, then per trajectory and part the
median and range of ``--repeat`` timings and the response's size.

``--credits N`` (once per database) gives the project a big credits table, as a finished
credit run over a 10M-step project does: ``N`` more steps in trajectories of 1,000 (written
by SQL, not the importer: only their rows matter here), then two finished runs with a
credit on every step of the project, a ``prm-delta`` run and an ``mc-prefix`` run (its
levels are the Monte Carlo values the page shows), 2 x (N + the measured steps) rows. It
then also times the worker's ``export_write`` of a saved selection of ten of those
trajectories (10,000 steps) with the ``prm-delta`` run's credits, in the ``rl`` format
(the bulk path) and the Stepscope format (the row builders). A third run, of
``first-error`` over none of the measured trajectories, checks the pickers list only the
runs that credit the trajectory shown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

from scoring import prm  # noqa: E402
from scoring.models import AttributionRun, Scorer, ScoringRun  # noqa: E402
from trajectories.models import Project, Trajectory  # noqa: E402
from trajectories.services import project_create  # noqa: E402
from trajectories.services.imports import trajectory_records_import  # noqa: E402

SLUG = "bench-evidence"
FILLER_STEPS = 1000  # steps of each trajectory ``--credits`` adds
EXPORT_TRAJECTORIES = 10  # of those, in the saved selection the export writes


def trajectory_get(project: Project, steps: int) -> Trajectory:
    external = f"long-{steps}"
    found = Trajectory.objects.filter(project=project, external_id=external).first()
    if found is not None:
        return found
    records = [
        {
            "id": external,
            "task": f"a task of {steps} steps",
            "steps": [{"content": f"step {n}: work"} for n in range(steps)],
        }
    ]
    trajectory_records_import(project=project, records=records)
    trajectory = Trajectory.objects.get(project=project, external_id=external)
    for number, name in enumerate(("bench-a", "bench-b")):
        scorer, _ = Scorer.objects.get_or_create(
            project=project, name=name, defaults={"kind": prm.EXTERNAL, "queue": "default"}
        )
        with connection.cursor() as cursor:
            # 0.55..0.95 until 70% of the way, then 0.3: the first error is late.
            cursor.execute(
                "INSERT INTO scoring_stepscore (step_id, scorer_id, value, raw, updated_at) "
                "SELECT s.id, %s, CASE WHEN s.index >= %s THEN 0.3 "
                "ELSE 0.55 + ((s.index * 7 + %s) %% 40) / 100.0 END, '{}', now() "
                "FROM trajectories_step s WHERE s.trajectory_id = %s",
                [scorer.pk, int(steps * 0.7), number, trajectory.pk],
            )
        ScoringRun.objects.create(
            project=project, scorer=scorer, kind=ScoringRun.Kind.IMPORT, status="done"
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE trajectories_step")
        cursor.execute("ANALYZE scoring_stepscore")
    return trajectory


def credits_add(project: Project, steps: int) -> AttributionRun:
    """``steps`` more steps in trajectories of ``FILLER_STEPS``, and the finished
    ``prm-delta`` and ``mc-prefix`` runs with a credit on every step of the project (once:
    later runs find them); the ``prm-delta`` run."""
    found = AttributionRun.objects.filter(
        project=project, method=AttributionRun.Method.PRM_DELTA, key="bench-every-step"
    ).first()
    if found is not None:
        return found
    started = time.perf_counter()
    trajectories = steps // FILLER_STEPS
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO trajectories_trajectory (external_id, source_format, task_key, task,"
            " ground_truth, model_name, metadata, step_count, content_hash, created_at,"
            " project_id, policy_version)"
            " SELECT 'filler-' || n, 'stepscope', 'filler-task-' || (n / 8), 'a filler task',"
            " '', 'bench', '{}', %s, md5('filler-' || n), now(), %s, ''"
            " FROM generate_series(0, %s - 1) n",
            [FILLER_STEPS, project.pk, trajectories],
        )
        cursor.execute(
            "INSERT INTO trajectories_step (trajectory_id, index, kind, role, agent, content,"
            " tool_name, metadata, labelable, prefix_hash, policy_version)"
            " SELECT t.id, i, 'message', 'assistant', '', 'step ' || i || ': work', '', '{}',"
            " true, '', '' FROM trajectories_trajectory t, generate_series(0, %s - 1) i"
            " WHERE t.project_id = %s AND t.external_id LIKE 'filler-%%' ORDER BY t.id, i",
            [FILLER_STEPS, project.pk],
        )
    print(f"filler: {trajectories:,} trajectories, {time.perf_counter() - started:.1f} s")
    runs = {}
    for method, key in (
        (AttributionRun.Method.PRM_DELTA, "bench-every-step"),
        (AttributionRun.Method.MC_PREFIX, "bench-every-step-mc"),
        (AttributionRun.Method.FIRST_ERROR, "bench-filler-only"),
    ):
        runs[method] = AttributionRun.objects.create(
            project=project,
            method=method,
            key=key,
            status=AttributionRun.Status.DONE,
            finished_at=timezone.now(),
        )
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for method in (AttributionRun.Method.PRM_DELTA, AttributionRun.Method.MC_PREFIX):
            # Credits in -0.5..0.5, levels (values) in 0..1, by the step's id.
            cursor.execute(
                "INSERT INTO scoring_stepcredit (step_id, run_id, value, level)"
                " SELECT s.id, %s, ((s.id * 37) %% 1000) / 1000.0 - 0.5,"
                " ((s.id * 53) %% 1000) / 1000.0"
                " FROM trajectories_step s JOIN trajectories_trajectory t"
                " ON t.id = s.trajectory_id WHERE t.project_id = %s ORDER BY s.id",
                [runs[method].pk, project.pk],
            )
        # A run over the first filler trajectory only: never shown on the measured ones.
        cursor.execute(
            "INSERT INTO scoring_stepcredit (step_id, run_id, value)"
            " SELECT s.id, %s, -1 FROM trajectories_step s WHERE s.trajectory_id ="
            " (SELECT min(id) FROM trajectories_trajectory"
            "  WHERE project_id = %s AND external_id LIKE 'filler-%%')",
            [runs[AttributionRun.Method.FIRST_ERROR].pk, project.pk],
        )
        for table in ("trajectories_trajectory", "trajectories_step", "scoring_stepcredit"):
            cursor.execute(f"ANALYZE {table}")
        cursor.execute("SELECT count(*) FROM scoring_stepcredit")
        (count,) = cursor.fetchone()
    print(f"credits: {count:,} rows, {time.perf_counter() - started:.1f} s")
    return runs[AttributionRun.Method.PRM_DELTA]


def export_call(project: Project, run: AttributionRun, format: str) -> Callable[[], int]:
    """A call writing the export of ten filler trajectories (a saved selection) with
    ``run``'s credits, the worker's ``export_write``, into a fresh folder."""
    from exports.models import Selection
    from exports.services import export_plan_build, export_write

    name = f"first-{EXPORT_TRAJECTORIES}-filler"
    if not Selection.objects.filter(project=project, name=name).exists():
        chosen = list(
            Trajectory.objects.filter(project=project, external_id__startswith="filler-")
            .order_by("id")
            .values_list("id", flat=True)[:EXPORT_TRAJECTORIES]
        )
        Trajectory.objects.filter(pk__in=chosen).update(metadata={"export_slice": 1})
        Selection.objects.create(
            project=project, name=name, definition={"meta": "metadata.export_slice = 1"}
        )
    plan = export_plan_build(
        project=project,
        format=format,
        labels="human:majority",
        neutral="keep",
        selection=name,
        credit_run=run.pk,
    )

    def export() -> int:
        with tempfile.TemporaryDirectory(prefix="bench-evidence-export-") as folder:
            manifest = export_write(plan, out_dir=Path(folder))
        return int(manifest["counts"]["steps"])

    return export


def timed(client: Client, url: str, params: dict[str, str], htmx: bool, repeat: int) -> str:
    headers = {"HX-Request": "true"} if htmx else {}
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(url, params, headers=headers)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, params, response.status_code)
        size = len(response.content)
    return _figures(times, f"{size:>10,} bytes")


def timed_call(call: Callable[[], int], repeat: int) -> str:
    times, steps = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        steps = call()
        times.append((time.perf_counter() - start) * 1000)
    return _figures(times, f"{steps:>10,} steps")


def _figures(times: list[float], size: str) -> str:
    return (
        f"median {statistics.median(times):9.1f} ms  "
        f"(range {min(times):.1f}-{max(times):.1f})  {size}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100_000, 1_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-page", action="store_true", help="leave out the full page")
    parser.add_argument(
        "--credits",
        type=int,
        default=0,
        metavar="N",
        help="add N steps and two credit runs over every step (once), and time exports",
    )
    args = parser.parse_args()
    print("$", " ".join([Path(sys.executable).name, *sys.argv]))
    print("database:", connection.settings_dict["NAME"])
    owner, _ = User.objects.get_or_create(username="bench-evidence", is_superuser=True)
    project = Project.objects.filter(slug=SLUG).first() or project_create(
        slug=SLUG, name="Bench evidence", owner=owner
    )
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client()
    client.force_login(owner)
    trajectories = [trajectory_get(project, steps) for steps in args.steps]
    run = credits_add(project, args.credits) if args.credits else None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scoring_stepcredit")
        print("credits table: {:,} rows".format(*cursor.fetchone()))
    for steps, trajectory in zip(args.steps, trajectories, strict=True):
        url = reverse("trajectory-evidence", args=[trajectory.pk])
        middle = steps // 2
        end = middle + 200
        step = trajectory.steps.get(index=middle)
        parts = [
            ("top", {"part": "top"}, True),
            ("columns x200", {"part": "columns", "from": f"{middle}", "to": f"{end}"}, True),
            ("step", {"part": "step", "step": str(step.pk)}, True),
        ]
        if not args.skip_page:
            parts.append(("page (no HTMX)", {}, False))
        for name, params, htmx in parts:
            print(f"{steps:>7} steps  {name:<15}", timed(client, url, params, htmx, args.repeat))
    if run is not None:
        for format in ("rl", "stepscope"):
            export = export_call(project, run, format)
            print(f"{'export 10k':>13}  {format:<15}", timed_call(export, args.repeat))


if __name__ == "__main__":
    main()
