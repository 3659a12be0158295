"""The queue's counts and the export page's label sources at scale: the queue list, a
label write in queue mode, the next queue item, and the export page right after a label
write, on a project whose one queue holds every trajectory.

    .venv/bin/python bench/queue_counts.py --steps 10000               # 5,000 items
    .venv/bin/python bench/queue_counts.py --steps 1200000 --keep      # 600,000 items
    .venv/bin/python bench/queue_counts.py --project bench-compare-123 # a kept one again

Data: what ``bench/compare.py`` writes with ``COPY`` (``--steps-per-trajectory`` 2: many
trajectories; a human label on every step, three annotators on a twentieth, a scorer's
score on every step), then a queue over every trajectory made by ``queue_create`` (as the
queue page makes it) and, in one statement, a submitted assignment from one of the three
annotators on ``--done`` of its items. Through Django's test client, ``--repeat`` times
after one warm-up: the queue list (``/p/<slug>/queues/``) as an annotator with one lease
and as one of the three who submitted the done items (their "mine"); a step label
posted in queue mode on the item they hold (the page's HTMX post with ``queue``); the
next item (``/q/<pk>/next/``, then skipped) as another annotator; and as a researcher the
export page (``/p/<slug>/exports/``) right after a label write, its counts made first as
a worker makes them (the making's time printed apart: a worker's, not the page's). Prints
the medians in ms and a JSON line; the project is dropped at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402

from bench.compare import ANNOTATORS, drop, generate  # noqa: E402
from labeling.models import Queue  # noqa: E402
from labeling.services import queue_create, queue_item_take  # noqa: E402
from scoring import prm  # noqa: E402
from scoring.models import Scorer  # noqa: E402
from trajectories.models import Membership, Project, Step  # noqa: E402
from trajectories.selection import TrajectoryFilters  # noqa: E402
from trajectories.services import membership_set, project_create  # noqa: E402

HTMX = {"HX-Request": "true"}

try:  # the export page's counts as a kept summary (absent from the code before it)
    from exports.selectors import CHOICES_PAGE
except ImportError:
    CHOICES_PAGE = ""


def export_counts_made(project: Project) -> float | None:
    """Make the export page's kept counts once, as a worker makes them for a large
    project (the page then shows them, with their age after a label write, while a
    worker counts again); how long the making took, in ms."""
    if not CHOICES_PAGE:
        return None
    from evaluation.kept import summary_make

    start = time.perf_counter()
    summary_make(project, CHOICES_PAGE, {})
    return round((time.perf_counter() - start) * 1000, 1)


def build(steps: int, per: int, done: float) -> tuple[Project, list[User]]:
    seed = int(time.time())
    slug = f"bench-compare-{seed}"
    project = project_create(slug=slug, name="bench queue counts")
    users = [User.objects.create(username=f"{slug}-ann{i}") for i in range(ANNOTATORS)]
    scorer = Scorer.objects.create(project=project, name="bench-prm", kind=prm.EXTERNAL)
    start = time.perf_counter()
    with transaction.atomic():
        generate(project, users, scorer, steps, per, seed)
    for user in users:
        membership_set(project=project, user=user, role=Membership.Role.ANNOTATOR)
    queue = queue_create(
        project=project, name="everything", created_by=None, filters=TrajectoryFilters()
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO labeling_queueassignment"
            " (item_id, annotator_id, status, leased_at, expires_at, submitted_at)"
            " SELECT i.id, (%s::int[])[1 + i.id %% %s], 'submitted', now(), now(), now()"
            " FROM labeling_queueitem i WHERE i.queue_id = %s AND random() < %s",
            [[u.pk for u in users], len(users), queue.pk, done],
        )
        for table in ("labeling_queueitem", "labeling_queueassignment"):
            cursor.execute(f"ANALYZE {table}")
    print(f"built {slug} in {time.perf_counter() - start:.0f} s", flush=True)
    return project, users


def person(project: Project, name: str, role: str) -> Client:
    user, _ = User.objects.get_or_create(username=f"{project.slug}-{name}")
    membership_set(project=project, user=user, role=role)
    client = Client()
    client.force_login(user)
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--steps-per-trajectory", type=int, default=2)
    parser.add_argument("--done", type=float, default=0.6, help="share of items submitted")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the project for another run")
    parser.add_argument("--project", help="the slug of a project kept by an earlier run")
    args = parser.parse_args()
    print("$", " ".join(["python", *sys.argv]), flush=True)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    if args.project:
        project = Project.objects.get(slug=args.project)
        users = list(
            User.objects.filter(username__startswith=f"{project.slug}-ann").order_by("username")
        )
    else:
        project, users = build(args.steps, args.steps_per_trajectory, args.done)
    queue = Queue.objects.get(project=project, name="everything")
    labeller = person(project, "labeller", Membership.Role.ANNOTATOR)
    taker = person(project, "taker", Membership.Role.ANNOTATOR)
    researcher = person(project, "researcher", Membership.Role.RESEARCHER)
    # An annotator who submitted a third of the done items: "mine" counts their own.
    busy = Client()
    busy.force_login(users[0])
    held = queue_item_take(
        queue=queue, annotator=User.objects.get(username=f"{project.slug}-labeller")
    )
    assert held is not None
    step = Step.objects.filter(trajectory_id=held.item.trajectory_id, labelable=True).first()
    assert step is not None
    values = iter(lambda: (-1, 0, 1)[time.perf_counter_ns() % 3], None)

    def label() -> int:
        return labeller.post(
            reverse("step-label", args=[step.pk]),
            {"value": next(values), "queue": queue.pk},
            headers=HTMX,
        ).status_code

    def queue_next() -> int:
        status = taker.post(reverse("queue-next", args=[queue.pk])).status_code
        taker.post(reverse("queue-skip", args=[queue.pk]))
        return status

    timed: dict[str, Callable[[], int]] = {
        "queue list": lambda: labeller.get(reverse("queue-list", args=[project.slug])).status_code,
        "queue list, a third submitted by the reader": lambda: (
            busy.get(reverse("queue-list", args=[project.slug])).status_code
        ),
        "label in queue mode": label,
        "queue next": queue_next,
        "exports page after a label write": lambda: (
            researcher.get(reverse("export-list", args=[project.slug])).status_code
        ),
    }
    made_ms = export_counts_made(project)
    times: dict[str, list[float]] = {name: [] for name in timed}
    try:
        for round_number in range(args.repeat + 1):
            for name, call in timed.items():
                if name.endswith("after a label write"):
                    assert label() == 200
                start = time.perf_counter()
                status = call()
                elapsed = (time.perf_counter() - start) * 1000
                assert status in (200, 302), f"{name}: {status}"
                if round_number:  # the first round warms caches and is not counted
                    times[name].append(elapsed)
        medians = {name: round(statistics.median(v), 1) for name, v in times.items()}
        for name, ms in medians.items():
            print(f"  {name:44} {ms:9.1f} ms", flush=True)
        figures = {
            "project": project.slug,
            "items": queue.items.count(),
            "ms": medians,
            "export_counts_made_ms": made_ms,
            "load": round(os.getloadavg()[0], 2),
        }
        print(json.dumps(figures), flush=True)
    finally:
        if not args.keep and not args.project:
            with transaction.atomic(), connection.cursor() as cursor:
                items = "SELECT i.id FROM labeling_queueitem i WHERE i.queue_id = %s"
                cursor.execute(
                    f"DELETE FROM labeling_queueassignment WHERE item_id IN ({items})", [queue.pk]
                )
                cursor.execute("DELETE FROM labeling_queueitem WHERE queue_id = %s", [queue.pk])
            User.objects.filter(username__startswith=f"{project.slug}-").exclude(
                pk__in=[u.pk for u in users]
            ).delete()
            drop(project, users)


if __name__ == "__main__":
    main()
