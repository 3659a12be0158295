"""What each part of the trajectory page's score/credit evidence costs on a long
trajectory against a short one (#37): ``GET /t/<id>/evidence/?part=top`` (strips, first
errors, pickers), ``?part=columns&from=&to=`` for 200 steps, ``?part=step&step=`` and
the page without HTMX (the first page of the evidence table).

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
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
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

from scoring import prm  # noqa: E402
from scoring.models import Scorer, ScoringRun  # noqa: E402
from trajectories.models import Project, Trajectory  # noqa: E402
from trajectories.services import project_create  # noqa: E402
from trajectories.services.imports import trajectory_records_import  # noqa: E402

SLUG = "bench-evidence"


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


def timed(client: Client, url: str, params: dict[str, str], htmx: bool, repeat: int) -> str:
    headers = {"HX-Request": "true"} if htmx else {}
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(url, params, headers=headers)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, params, response.status_code)
        size = len(response.content)
    return (
        f"median {statistics.median(times):9.1f} ms  "
        f"(range {min(times):.1f}-{max(times):.1f})  {size:>10,} bytes"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[100_000, 1_000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-page", action="store_true", help="leave out the full page")
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
    for steps in args.steps:
        trajectory = trajectory_get(project, steps)
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


if __name__ == "__main__":
    main()
