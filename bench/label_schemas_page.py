"""How long a 1,000-step trajectory page takes to come back when its project labels under
four schemas at once (correctness, error type, severity, progress), and under those four
with a span schema and a rubric as well, against the same page of a project with its one
schema (the page as it was before several schemas), in one run.

    .venv/bin/python bench/label_schemas_page.py                 # 1,000 steps, 15 loads each
    .venv/bin/python bench/label_schemas_page.py --steps 1000 --repeat 21

Writes three throwaway projects (``bench-schemas-<time>-1``, ``-4`` and ``-6``) with the
same ProcessBench trajectory (``bench/page_open.py``'s), a label by the bench user on every
tenth step under each schema; the third (``6``: four schemas, a span schema, a rubric)
also has the bench user's span of ten steps every fiftieth step and their mark with two
evidence steps on each of the rubric's three criteria. Starts the web server
(``manage.py runserver --noreload``, DEBUG off) against the configured database and
fetches each trajectory page (its first 200 steps, as the page opens) ``--repeat`` times,
alternating. Prints, per project, the median and range of the time to the whole response
and the number of SQL queries the page makes (counted in process with the test client).
The projects and the bench user are dropped at the end.
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

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench.page_open import free_port, server_start, trajectory_make  # noqa: E402
from labeling.models import LabelSchema, StepLabel  # noqa: E402
from labeling.selectors import labeling_state_for_user  # noqa: E402
from labeling.services import label_schema_create, span_label_set, span_schema_save  # noqa: E402
from labeling.services.rubrics import rubric_mark_set, rubric_save  # noqa: E402
from trajectories.models import Membership, Project, Trajectory  # noqa: E402
from trajectories.services import project_create  # noqa: E402

MORE = [
    ("error_type", "categorical", [("math", "4"), ("logic", "5"), ("tool", "6")]),
    ("severity", "ordinal", [("minor", "7"), ("major", "8"), ("critical", "9")]),
    ("progress", "ordinal", [("none", "z"), ("some", "x"), ("solved", "w")]),
]


CRITERIA = [
    {"text": "States the problem's quantities correctly", "weight": 2},
    {"text": "Each step follows from the one before", "weight": 1},
    {"text": "The final answer is checked", "weight": 1},
]
# The projects measured: one schema; four; four with a span schema and a rubric.
WAYS = {1: "1 schema", 4: "4 schemas", 6: "4 schemas + span schema + rubric"}


def project_make(slug: str, user: User, steps: int, schemas: int) -> Trajectory:
    project = project_create(slug=slug, name=slug)
    Membership.objects.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    for name, kind, values in MORE[: min(schemas, 4) - 1]:
        label_schema_create(
            project=project,
            name=name,
            kind=kind,
            values=[{"value": i + 1, "name": n, "key": k} for i, (n, k) in enumerate(values)],
        )
    with tempfile.TemporaryDirectory() as folder:
        trajectory = trajectory_make(project, steps, Path(folder))
    labelled = list(trajectory.steps.filter(labelable=True).order_by("index"))[::10]
    StepLabel.objects.bulk_create(
        StepLabel(step=step, annotator=user, schema=schema, value=schema.entries[0]["value"])
        for schema in LabelSchema.objects.filter(project=project, is_active=True)
        for step in labelled
    )
    if schemas > 4:
        extras_make(project, trajectory, user)
    return trajectory


def extras_make(project: Project, trajectory: Trajectory, user: User) -> None:
    """A span schema with the user's spans and a rubric with the user's marks, through the
    services the page's keys call."""
    span_schema_save(project=project, name="triage")
    rubric = rubric_save(project=project, user_id=user.pk, criteria=CRITERIA)
    state = labeling_state_for_user(user, trajectory.pk)
    for start in range(0, trajectory.step_count - 10, 50):
        value = "decisive progress" if start % 100 else "useful exploration"
        span_label_set(state=state, schema="triage", start=start, end=start + 9, value=value)
    for criterion in range(len(CRITERIA)):
        rubric_mark_set(
            state=state,
            rubric_id=rubric.pk,
            criterion=criterion,
            mark="met" if criterion else "not_met",
            evidence=[criterion * 10, criterion * 10 + 1],
        )


def summary(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.1f} ms (range {min(values):.1f} to {max(values):.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(
        "command: .venv/bin/python bench/label_schemas_page.py"
        f" --steps {args.steps} --repeat {args.repeat}"
    )
    slug = f"bench-schemas-{int(time.time())}"
    user = User.objects.create_user(username=slug)
    trajectories = {n: project_make(f"{slug}-{n}", user, args.steps, n) for n in WAYS}
    server = None
    try:
        client = Client(SERVER_NAME="127.0.0.1")
        client.force_login(user)
        queries = {}
        for n, trajectory in trajectories.items():
            with CaptureQueriesContext(connection) as captured:
                response = client.get(f"/t/{trajectory.pk}/")
            assert response.status_code == 200
            assert response.content.count(b'class="label-form') >= 200 * min(n, 4), n
            queries[n] = len(captured.captured_queries)
        cookie = {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}
        port = free_port()
        server = server_start(port)
        times: dict[int, list[float]] = {n: [] for n in WAYS}
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", cookies=cookie, timeout=120) as http:
            for trajectory in trajectories.values():  # warm: the server's first hit
                http.get(f"/t/{trajectory.pk}/").raise_for_status()
            for _ in range(args.repeat):
                for n, trajectory in trajectories.items():
                    start = time.perf_counter()
                    http.get(f"/t/{trajectory.pk}/").raise_for_status()
                    times[n].append((time.perf_counter() - start) * 1000)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        Project.objects.filter(slug__startswith=slug).delete()
        user.delete()
    print(f"page: {args.steps} steps, the first 200 shown, a label on every tenth per schema")
    for n, name in WAYS.items():
        print(f"{name}: {summary(times[n])}; {queries[n]} queries")
    for n in (4, 6):
        ratio = statistics.median(times[n]) / statistics.median(times[1])
        print(f"ratio ({WAYS[n]} / 1 schema, medians): {ratio:.2f}")
    print(json.dumps({"one": times[1], "four": times[4], "full": times[6], "queries": queries}))


if __name__ == "__main__":
    main()
