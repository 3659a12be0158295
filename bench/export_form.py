"""The export form on a big project: how long the export page and its preview take to
answer when the project holds a million labelled and scored steps.

    .venv/bin/python bench/export_form.py                       # 1,000,000 steps
    .venv/bin/python bench/export_form.py --steps 200000 --repeat 5
    .venv/bin/python bench/export_form.py --keep                # keep the project ...
    .venv/bin/python bench/export_form.py --project bench-compare-123   # ... and reuse it

Data: what ``bench/compare.py`` writes (trajectories, steps, a human label on every step,
three annotators on a few trajectories, a scorer's score on every step, all by ``COPY``),
with the three annotators made members so that each is a label source of the form. Then,
through Django's test client as a researcher: the export page (``GET /p/<slug>/exports/``,
the form with every label source, scorer, run and selection offered with its count) and
the preview the page asks for on load and on every change of the form
(``/p/<slug>/exports/preview/``, ``human:majority`` to ``trl-stepwise``). Each is asked
``--repeat`` times; the first answer and the median of the rest are printed, in seconds
of wall clock and of CPU (this process and the PostgreSQL backend serving it), with the
load average (the machine may be shared). A JSON line last. The project is dropped at the
end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from bench.compare import ANNOTATORS, _backend_cpu, drop, generate  # noqa: E402
from scoring import prm  # noqa: E402
from scoring.models import Scorer  # noqa: E402
from trajectories.models import Membership, Project  # noqa: E402
from trajectories.services import membership_set, project_create  # noqa: E402

PREVIEW = {"format": "trl-stepwise", "labels": "human:majority", "neutral": "drop"}


def timed(client: Client, url: str, params: dict[str, str], repeat: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        backend, own = _backend_cpu(), time.process_time()
        start = time.perf_counter()
        response = client.get(url, params)
        walls.append(time.perf_counter() - start)
        after = _backend_cpu()
        if backend is not None and after is not None:
            cpus.append(after - backend + time.process_time() - own)
        assert response.status_code == 200, (url, response.status_code)
    rest = walls[1:] or walls
    figures = {"first_s": round(walls[0], 3), "median_s": round(statistics.median(rest), 3)}
    if cpus:
        figures["first_cpu_s"] = round(cpus[0], 3)
        figures["median_cpu_s"] = round(statistics.median(cpus[1:] or cpus), 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the project for another run")
    parser.add_argument("--project", help="the slug of a project kept by an earlier run")
    args = parser.parse_args()
    print("$", " ".join(["python", *sys.argv]), flush=True)

    if args.project:
        project = Project.objects.get(slug=args.project)
        users = list(User.objects.filter(username__startswith=f"{project.slug}-ann"))
    else:
        seed = int(time.time())
        slug = f"bench-compare-{seed}"
        project = project_create(slug=slug, name="bench export form")
        users = [User.objects.create(username=f"{slug}-ann{i}") for i in range(ANNOTATORS)]
        scorer = Scorer.objects.create(project=project, name="bench-prm", kind=prm.EXTERNAL)
        start = time.perf_counter()
        with transaction.atomic():
            steps = generate(project, users, scorer, args.steps, args.steps_per_trajectory, seed)
        print(f"wrote {steps:,} labelled and scored steps in {time.perf_counter() - start:.1f} s")
        for user in users:
            membership_set(project=project, user=user, role=Membership.Role.ANNOTATOR)
    researcher, _ = User.objects.get_or_create(username=f"{project.slug}-researcher")
    membership_set(project=project, user=researcher, role=Membership.Role.RESEARCHER)
    try:
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(researcher)
        figures = {
            "project": project.slug,
            "page": timed(client, reverse("export-list", args=[project.slug]), {}, args.repeat),
            "preview": timed(
                client, reverse("export-preview", args=[project.slug]), PREVIEW, args.repeat
            ),
            "load": round(os.getloadavg()[0], 2),
        }
        for name in ("page", "preview"):
            print(f"{name}: {figures[name]}", flush=True)
        print(json.dumps(figures), flush=True)
    finally:
        if not args.keep and not args.project:
            researcher.delete()
            drop(project, users)


if __name__ == "__main__":
    main()
