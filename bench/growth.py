"""Growth: the requests a user makes every minute, timed as a project grows from ten
thousand stored steps to ten million.

    STEPSCOPE_DATA_DIR=/tmp/growth .venv/bin/python bench/growth.py                 # 10k, 1M, 10M
    .venv/bin/python bench/growth.py --sizes 10000,100000 --repeat 5              # a quick look

For each size it builds a project (``growth-<size>-<time>``) through the real importer (a
Stepscope JSONL file written first: math chains and agent traces with tool calls, in task
groups of 8 rollouts, one trajectory of ``--big`` steps from 1M steps up; labels from
three annotators, one on every labelable step and all three on a twentieth of the
trajectories), builds its search documents (as a worker does after an import), then adds
two scorers' scores on every step with ``COPY`` (as ``import_scores`` writes them), one
finished credit run with a credit on every step, Monte Carlo values on the steps of a
twentieth of the trajectories (``--enrich SLUG`` adds these to a kept project), a queue
and a saved selection. A child process then times
each request with Django's test client (``--repeat`` times, alternating, after one warm-up):
the trajectory page at 20, 1,000 and the big step count and its lazy parts, a label write
(the page's HTMX post and the API), the next queue item, the list with each filter, each
sort and the text search, the saved selection's count, compare, failures, the prefix tree
of one task, the export preview, the scoring section, an export of a 10,000-step saved
selection (the worker's ``export_write``), the planning of a scoring run over the same
selection (the worker's ``scoring_run_plan``, rolled back) and a live-trace append (one
span posted to
``/v1/traces`` as OTLP JSON, then assembled as the worker does). Compare and failures
read their kept summaries, made first in a child process of their own as a worker makes
them: their making's time (``summary_make_ms``) and that process's peak RSS
(``worker_peak_rss_mb``) are reported apart from the timing child's
(``web_peak_rss_mb``: flat from size to size when no request loads a project's rows).
``--keep`` keeps the projects; ``--measure SLUG prm-0,prm-1`` times a kept one again
(``--summaries`` the same for the summaries).

Prints, per size, one JSON line (import time, medians and ranges in ms, peak RSS); then the
ratio of each request's median at the largest size to the smallest, the database size of
each table and index, and the disk the data directory takes. Run it against a data directory
of its own (``STEPSCOPE_DATA_DIR`` with ``DATABASE_URL`` unset starts an embedded
PostgreSQL there): a 10M-step project takes some 10 GB. The projects are dropped at the end
unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from evaluation.kept import summary_refresh  # noqa: E402
from evaluation.models import KeptSummary  # noqa: E402
from scoring import prm  # noqa: E402
from scoring.models import Scorer  # noqa: E402
from trajectories.models import Membership, Project, Step, Trajectory  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402
from trajectories.services.search import trajectory_search_index  # noqa: E402

ROLLOUTS_PER_TASK = 8
ANNOTATORS = ("ann-a", "ann-b", "ann-c")
MODELS = ("policy-a", "policy-b", "policy-c")
TOOLS = ("python", "search", "shell")
WORDS = (
    "the",
    "value",
    "is",
    "carried",
    "forward",
    "so",
    "we",
    "add",
    "the",
    "next",
    "term",
    "and",
    "check",
    "the",
    "bound",
    "again",
    "while",
    "keeping",
    "the",
    "remainder",
    "in",
    "mind",
    "then",
    "compare",
    "with",
    "the",
    "expected",
    "result",
    "and",
    "move",
    "on",
)
PASSWORD = "growth-bench-pw"


# --- The data -------------------------------------------------------------------------------


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _math(rng: random.Random, name: str, task: str, task_key: str, steps: int) -> dict[str, Any]:
    wrong = rng.randrange(steps) if rng.random() < 0.5 else -1
    body = []
    for index in range(steps):
        value = -1 if index == wrong else 1
        body.append(
            {
                "kind": "answer" if index == steps - 1 else "thought",
                "content": f"Step {index + 1}: {_text(rng, 24)} = {rng.randint(1, 999)}",
                "labels": [{"annotator": ANNOTATORS[hash(name) % 3], "value": value}],
            }
        )
    return {
        "id": name,
        "task": task,
        "task_key": task_key,
        "ground_truth": str(rng.randint(1, 999)),
        "model": MODELS[rng.randrange(3)],
        "outcome": {"reward": 0.0 if wrong >= 0 else 1.0, "success": wrong < 0},
        "steps": body,
    }


def _agent(rng: random.Random, name: str, task: str, task_key: str, steps: int) -> dict[str, Any]:
    body: list[dict[str, Any]] = [{"kind": "message", "role": "user", "content": task}]
    failed = rng.random() < 0.4
    while len(body) < steps - 1:
        tool = TOOLS[rng.randrange(3)]
        body.append(
            {
                "kind": "tool_call",
                "content": _text(rng, 16),
                "agent": "solver",
                "tool_name": tool,
                "tool_args": {"query": _text(rng, 4)},
                "labels": [
                    {"annotator": ANNOTATORS[hash(name) % 3], "value": rng.choice((1, 1, 0))}
                ],
            }
        )
        if len(body) < steps - 1:
            error = failed and rng.random() < 0.2
            body.append(
                {
                    "kind": "tool_result",
                    "role": "tool",
                    "tool_name": tool,
                    "content": ("Error: " if error else "") + _text(rng, 30),
                    "metadata": {"is_error": error},
                }
            )
    body.append(
        {
            "kind": "answer",
            "content": _text(rng, 12),
            "agent": "solver",
            "labels": [{"annotator": ANNOTATORS[hash(name) % 3], "value": -1 if failed else 1}],
        }
    )
    return {
        "id": name,
        "task": task,
        "task_key": task_key,
        "model": MODELS[rng.randrange(3)],
        "outcome": {"reward": 0.0 if failed else 1.0, "success": not failed},
        "steps": body,
    }


def _overlap(record: dict[str, Any]) -> dict[str, Any]:
    """All three annotators label every labelable step (a second and third opinion that
    agree nine times out of ten)."""
    rng = random.Random(record["id"])
    for step in record["steps"]:
        if step.get("labels"):
            first = step["labels"][0]
            step["labels"] = [
                {
                    "annotator": name,
                    "value": first["value"] if rng.random() < 0.9 else rng.choice((-1, 0, 1)),
                }
                for name in ANNOTATORS
            ]
    return record


def records(size: int, big: int, seed: int) -> Iterator[dict[str, Any]]:
    """Trajectories of ``size`` steps in all: 20- and 1,000-step ones to time the page
    with, one of ``big`` steps when there is room for it, then task groups of 8 rollouts
    (math chains of 6-20 steps and agent traces of 8-30), a twentieth labelled by all
    three annotators."""
    rng = random.Random(seed)
    left = size
    fixed = [("page-20", 20), ("page-1000", 1000)]
    if big and size >= 10 * big:
        fixed.append(("page-big", big))
    for name, steps in fixed:
        yield _math(rng, name, f"A long problem {name}", name, steps)
        left -= steps
    number = 0
    while left > 0:
        task_number = number // ROLLOUTS_PER_TASK
        agent = task_number % 5 < 2
        task = f"Task {task_number}: {_text(rng, 20)}"
        for _ in range(ROLLOUTS_PER_TASK):
            steps = min(left, rng.randint(8, 30) if agent else rng.randint(6, 20))
            if steps <= 0:
                return
            make = _agent if agent and steps >= 3 else _math
            record = make(rng, f"r-{number}", task, f"task-{task_number}", steps)
            left -= len(record["steps"])
            number += 1
            yield _overlap(record) if number % 20 == 0 else record


def _copy(table_and_columns: str, lines: Iterator[str]) -> None:
    with (
        connection.cursor() as wrapper,
        wrapper.cursor.copy(f"COPY {table_and_columns} FROM STDIN") as copy,
    ):
        batch: list[str] = []
        for line in lines:
            batch.append(line)
            if len(batch) == 20_000:
                copy.write("".join(batch))
                batch.clear()
        copy.write("".join(batch))


def scores_add(project: Project, seed: int) -> list[str]:
    """Two external scorers with a score on every step; returns their names."""
    names = []
    now = timezone.now().isoformat()
    step_ids = Step.objects.filter(trajectory__project=project).values_list("id", flat=True)
    ids = list(step_ids.iterator(chunk_size=50_000))
    for number in range(2):
        scorer = Scorer.objects.create(project=project, name=f"prm-{number}", kind=prm.EXTERNAL)
        rng = random.Random(seed + number)
        _copy(
            "scoring_stepscore (step_id, scorer_id, value, raw, updated_at)",
            (f"{sid}\t{scorer.pk}\t{rng.random():.6f}\t{{}}\t{now}\n" for sid in ids),
        )
        names.append(scorer.name)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scoring_stepscore")
    return names


# A twentieth of the trajectories have Monte Carlo values on their steps (rollouts from
# each step, as a first-error search leaves them).
MC_SHARE = 20


def credits_and_mc_add(project: Project, scorer: str, seed: int) -> dict[str, float]:
    """One finished ``prm-delta`` credit run with a credit on every step, and Monte Carlo
    values (k = 8) on the steps of every ``MC_SHARE``-th trajectory, by ``COPY``; how
    long each took."""
    from rollouts.models import Policy
    from scoring.models import AttributionRun

    taken = {}
    rng = random.Random(seed + 7)
    started = time.perf_counter()
    run = AttributionRun.objects.create(
        project=project,
        method=AttributionRun.Method.PRM_DELTA,
        scorer=Scorer.objects.get(project=project, name=scorer),
        status=AttributionRun.Status.DONE,
        finished_at=timezone.now(),
    )
    steps = Step.objects.filter(trajectory__project=project).order_by("id")
    ids = list(steps.values_list("id", flat=True).iterator(chunk_size=50_000))
    _copy(
        "scoring_stepcredit (step_id, run_id, value, level)",
        (f"{sid}\t{run.pk}\t{rng.uniform(-0.5, 0.5):.6f}\t{rng.random():.6f}\n" for sid in ids),
    )
    AttributionRun.objects.filter(pk=run.pk).update(total=len(ids), done=len(ids))
    taken["credits_copy_s"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    policy = Policy.objects.create(project=project, name="growth-policy", model_ref="growth/policy")
    shared = (
        Step.objects.filter(trajectory__project=project, trajectory_id__in=_every_nth(project))
        .order_by("id")
        .values_list("id", flat=True)
    )
    now = timezone.now().isoformat()

    # Read first: the connection cannot read rows while it is copying them in.
    shared_ids = list(shared.iterator(chunk_size=50_000))

    def mc_lines() -> Iterator[str]:
        for sid in shared_ids:
            successes = rng.randint(0, 8)
            yield f"{sid}\t{policy.pk}\t8\t{successes}\t{successes / 8}\t{successes > 0}\t{now}\n"

    _copy("rollouts_stepmc (step_id, policy_id, k, successes, soft, hard, updated_at)", mc_lines())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scoring_stepcredit")
        cursor.execute("ANALYZE rollouts_stepmc")
    taken["mc_copy_s"] = round(time.perf_counter() - started, 1)
    return taken


def _every_nth(project: Project) -> Any:
    """The ids of every ``MC_SHARE``-th trajectory of the project (by id)."""
    from django.db.models.functions import Mod

    return (
        Trajectory.objects.filter(project=project)
        .annotate(nth=Mod("id", MC_SHARE))
        .filter(nth=0)
        .values("id")
    )


def build(size: int, big: int, seed: int, folder: Path) -> dict[str, Any]:
    slug = f"growth-{size}-{int(time.time())}"
    project = project_create(slug=slug, name=f"Growth {size:,}")
    path = folder / f"{slug}.jsonl"
    started = time.perf_counter()
    with path.open("w") as out:
        for record in records(size, big, seed):
            out.write(json.dumps(record) + "\n")
    written = time.perf_counter() - started
    started = time.perf_counter()
    trajectory_import(project=project, source_format="stepscope", path=path)
    imported = time.perf_counter() - started
    path.unlink()
    # What the worker does after an import commits: the full-text search documents.
    started = time.perf_counter()
    trajectory_search_index(project_id=project.pk)
    indexed = time.perf_counter() - started
    started = time.perf_counter()
    scorers = scores_add(project, seed)
    scored = time.perf_counter() - started
    enriched = credits_and_mc_add(project, scorers[0], seed)
    user = User.objects.create_user(username=slug, password=PASSWORD)
    Membership.objects.create(project=project, user=user, role=Membership.Role.ADMIN)
    steps = Step.objects.filter(trajectory__project=project).count()
    return {
        "slug": slug,
        "steps": steps,
        "trajectories": Trajectory.objects.filter(project=project).count(),
        "file_write_s": round(written, 1),
        "import_s": round(imported, 1),
        "import_steps_per_s": round(steps / imported),
        "search_index_s": round(indexed, 1),
        "scores_copy_s": round(scored, 1),
        **enriched,
        "scorers": scorers,
    }


# --- The requests ---------------------------------------------------------------------------


def _trajectory(project: Project, external_id: str) -> Trajectory | None:
    return Trajectory.objects.filter(project=project, external_id=external_id).first()


def requests_for(project: Project, client: Client, scorers: list[str]) -> dict[str, Any]:
    """name -> (method, url, data) or a callable doing one request; the queue and the
    saved selection are made here, through their pages."""
    slug = project.slug
    small = _trajectory(project, "page-20")
    page = _trajectory(project, "page-1000")
    big = _trajectory(project, "page-big")
    assert small and page
    step = Step.objects.filter(trajectory=page, labelable=True).order_by("index").first()
    assert step is not None
    group = Trajectory.objects.filter(project=project, external_id="r-0").first()
    task_key = group.task_key if group else ""
    queue_name = f"q-{slug}"
    from exports.models import Selection
    from labeling.models import Queue

    # Made through their pages the first time; a later ``--measure`` of a kept project
    # reuses them.
    if not Queue.objects.filter(project=project, name=queue_name).exists():
        response = client.post(
            f"/p/{slug}/queues/new/",
            {"name": queue_name, "lease_minutes": 30, "overlap": 1, "order": "position"},
        )
        assert response.status_code == 302, response.content.decode()[-3000:]
    queue = Queue.objects.get(project=project, name=queue_name)
    if not Selection.objects.filter(project=project, name="failed").exists():
        response = client.post(f"/p/{slug}/selections/", {"name": "failed", "outcome": "failure"})
        assert response.status_code == 302, response.content.decode()[-3000:]
    export_10k = _export_selection(project, EXPORT_STEPS)
    scoring_plan = _scoring_planner(project, f"first-{EXPORT_STEPS}")
    live = _live_appender(project)

    values = iter(lambda: random.choice((-1, 0, 1)), None)

    def label_htmx() -> int:
        return client.post(
            f"/steps/{step.pk}/label/", {"value": next(values)}, HTTP_HX_REQUEST="true"
        ).status_code

    def label_api() -> int:
        return client.post(
            "/api/v1/labels/",
            {"step": step.pk, "value": next(values)},
            content_type="application/json",
        ).status_code

    def queue_next() -> int:
        status = client.post(f"/q/{queue.pk}/next/").status_code
        client.post(f"/q/{queue.pk}/skip/")
        return status

    plain: dict[str, str] = {
        "home": "/",
        "project home": f"/p/{slug}/",
        "page 20 steps": f"/t/{small.pk}/",
        "page 1,000 steps": f"/t/{page.pk}/",
        "page steps chunk": f"/t/{page.pk}/steps/?start=500",
        "page evidence": f"/t/{page.pk}/evidence/",
        "step content": f"/steps/{step.pk}/content/",
        "list": f"/p/{slug}/trajectories/",
        "list q": f"/p/{slug}/trajectories/?q=remainder",
        "list model": f"/p/{slug}/trajectories/?model=policy-b",
        "list task": f"/p/{slug}/trajectories/?task={task_key}",
        "list outcome": f"/p/{slug}/trajectories/?outcome=failure",
        "list api": f"/api/v1/trajectories/?project={slug}",
        "selections": f"/p/{slug}/selections/",
        "compare": f"/p/{slug}/compare/?scorer={scorers[0]}",
        "failures": f"/p/{slug}/failures/",
        "tree": f"/p/{slug}/tree/?task={task_key}",
        "export preview": f"/p/{slug}/exports/preview/?format=stepscope&labels=human:majority",
        "exports page": f"/p/{slug}/exports/",
        "queues": f"/p/{slug}/queues/",
        "review list": f"/p/{slug}/review/",
        "failure modes": f"/p/{slug}/failures/modes/",
        "compare humans": f"/p/{slug}/compare/humans/",
        "compare disagreements": f"/p/{slug}/compare/disagreements/?scorer={scorers[0]}",
        "scoring": f"/p/{slug}/scoring/",
    }
    # The page's lazy parts, as its HTMX asks for them: the score strips and first errors,
    # and the score and credit column of the first chunk of rows.
    lazy = {
        "page 1,000 top": f"/t/{page.pk}/evidence/?part=top",
        "page 1,000 columns": f"/t/{page.pk}/evidence/?part=columns&from=0&to=200",
    }
    if big is not None:
        plain["page big"] = f"/t/{big.pk}/"
        lazy["page big top"] = f"/t/{big.pk}/evidence/?part=top"
        lazy["page big columns"] = f"/t/{big.pk}/evidence/?part=columns&from=0&to=200"
    timed: dict[str, Any] = {
        name: (lambda url=url: client.get(url).status_code) for name, url in plain.items()
    }
    timed.update(
        {
            name: (lambda url=url: client.get(url, HTTP_HX_REQUEST="true").status_code)
            for name, url in lazy.items()
        }
    )
    timed.update(
        {
            "label htmx": label_htmx,
            "label api": label_api,
            "queue next": queue_next,
            f"export {EXPORT_STEPS // 1000}k steps": export_10k,
            f"scoring plan {EXPORT_STEPS // 1000}k steps": scoring_plan,
            "live append": live,
        }
    )
    return timed


# An export of a selection of this many steps, timed at every size.
EXPORT_STEPS = 10_000


def _export_selection(project: Project, steps: int) -> Any:
    """A saved selection of the first rollouts, ``steps`` steps in all (marked in their
    metadata once), and a call writing its export (the worker's ``export_write``, the
    Stepscope JSONL format with the majority labels) into a fresh folder."""
    from exports.models import Selection
    from exports.services import export_plan_build, export_write

    name = f"first-{steps}"
    if not Selection.objects.filter(project=project, name=name).exists():
        chosen, total = [], 0
        rows = (
            Trajectory.objects.filter(project=project, external_id__startswith="r-")
            .order_by("id")
            .values_list("id", "step_count")
        )
        for pk, count in rows.iterator(chunk_size=1000):
            if total >= steps:
                break
            chosen.append(pk)
            total += count
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE trajectories_trajectory SET metadata = metadata || '{\"export_slice\": 1}'"
                " WHERE id = ANY(%s)",
                [chosen],
            )
        Selection.objects.create(
            project=project, name=name, definition={"meta": "metadata.export_slice = 1"}
        )
    plan = export_plan_build(
        project=project,
        format="stepscope",
        labels="human:majority",
        neutral="keep",
        selection=name,
    )

    def export() -> int:
        with tempfile.TemporaryDirectory(prefix="growth-export-") as folder:
            manifest = export_write(plan, out_dir=Path(folder))
        assert manifest, manifest
        return 200

    return export


def _scoring_planner(project: Project, selection: str) -> Any:
    """A call planning a scoring run over a saved selection (the worker's
    ``scoring_run_plan``: the selected steps read and split into chunks, written), in a
    transaction rolled back, so no chunk is queued and nothing stays. The scorer is a
    model kind's (its weights are never loaded: planning reads only steps)."""
    from exports.models import Selection
    from scoring.models import ScoringRun
    from scoring.services.scores import scoring_run_plan

    scorer, _ = Scorer.objects.get_or_create(
        project=project,
        name="growth-plan",
        defaults={"kind": prm.SEQUENCE_CLASSIFIER, "model_ref": "growth/unloaded"},
    )
    definition = Selection.objects.get(project=project, name=selection).definition

    def plan() -> int:
        with transaction.atomic():
            run = ScoringRun.objects.create(
                project=project,
                scorer=scorer,
                kind=ScoringRun.Kind.SCORE,
                selection={"only_unscored": False, "filters": definition},
            )
            scoring_run_plan(run_id=run.pk)
            run.refresh_from_db()
            # The selection's labelable steps (a tool's output is not scored).
            assert run.total and run.chunks_total, (run.total, run.chunks_total)
            transaction.set_rollback(True)
        return 200

    return plan


def _live_appender(project: Project) -> Any:
    """A call appending one span to a live trace as an OpenTelemetry exporter sends it
    (``POST /v1/traces``, OTLP JSON, the project's API token), then assembling it as the
    worker does (``live_traces_assemble``): the step is in the trajectory when it returns."""
    from accounts.services import api_token_create
    from tests.trajectories.otlp_bodies import agent_spans, json_body
    from trajectories.services.assembly import live_traces_assemble

    user = User.objects.get(username=project.slug)
    _, secret = api_token_create(user=user, name=f"growth live {time.time()}")
    client = Client()
    counter = iter(range(10**9))
    trace = 10**6 + project.pk
    run = int(time.time()) % 10**8  # a later run's spans are new ones, not duplicates

    def append() -> int:
        number = next(counter)
        span = agent_spans(trace)[5 if number else 0]
        if number:
            span = {**span, "n": 5 + number, "span_id": f"{run:08x}{number:08x}"}
        status = client.post(
            "/v1/traces",
            json_body([span], project=project.slug),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
        ).status_code
        live_traces_assemble()
        return status

    append()  # the trace's root: later calls append to it
    return append


def summaries_made(project: Project, timed: dict[str, Any]) -> dict[str, float]:
    """The kept summaries (compare, failures, the review list, the home's step counts,
    the export page's counts, agreement between humans, the disagreements),
    made once as the page or its worker makes them (in the request below
    STEPSCOPE_SUMMARY_INLINE_STEPS, by a worker above: the bench runs the worker's task
    here); returns how long each making took. The timed requests then read them kept,
    made again in the request or queued whenever a label write of the rounds moved what
    they read."""
    kept_pages = (
        "compare",
        "failures",
        "review list",
        "project home",
        "exports page",
        "compare humans",
        "compare disagreements",
    )
    for name in kept_pages:
        timed[name]()
    made = {}
    for row in KeptSummary.objects.filter(project=project):
        if row.value is None:
            summary_refresh(project_id=project.pk, page=row.page, params=row.params)
            row.refresh_from_db()
        made[row.page] = round((row.seconds or 0) * 1000, 1)
    return made


def summaries(slug: str, scorers: list[str]) -> dict[str, Any]:
    """Runs in a child process of its own: the summaries' making, as a worker makes them,
    and its peak RSS (the worker's memory), apart from the web's."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    project = Project.objects.get(slug=slug)
    client = Client()
    client.force_login(User.objects.get(username=slug))
    made = summaries_made(project, requests_for(project, client, scorers))
    return {
        "summary_make_ms": made,
        "worker_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def measure(slug: str, repeat: int, scorers: list[str]) -> dict[str, Any]:
    """Runs in a child process of its own, so that its peak RSS is the web's at this
    size (the summaries it reads were made by ``summaries`` in another)."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    project = Project.objects.get(slug=slug)
    client = Client()
    client.force_login(User.objects.get(username=slug))
    timed = requests_for(project, client, scorers)
    times: dict[str, list[float]] = {name: [] for name in timed}
    statuses: dict[str, int] = {}
    for round_number in range(repeat + 1):
        for name, call in timed.items():
            started = time.perf_counter()
            statuses[name] = call()
            if round_number:  # the first round warms caches and is not counted
                times[name].append((time.perf_counter() - started) * 1000)
    return {
        "ms": {
            name: {
                "median": round(statistics.median(v), 1),
                "min": round(min(v), 1),
                "max": round(max(v), 1),
            }
            for name, v in times.items()
        },
        "status": {name: code for name, code in statuses.items() if code >= 400},
        "web_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def sizes_on_disk() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, c.relkind, pg_total_relation_size(c.oid)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')"
            " ORDER BY pg_total_relation_size(c.oid) DESC LIMIT 25"
        )
        rows = cursor.fetchall()
        cursor.execute("SELECT pg_database_size(current_database())")
        (database,) = cursor.fetchone()
    return {
        "database_mb": round(database / 2**20),
        "largest_mb": {name: round(size / 2**20, 1) for name, _, size in rows},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,1000000,10000000")
    parser.add_argument("--big", type=int, default=100_000, help="steps of the one big trajectory")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the projects")
    parser.add_argument("--measure", nargs=2, metavar=("SLUG", "SCORERS"), help=argparse.SUPPRESS)
    parser.add_argument("--summaries", nargs=2, metavar=("SLUG", "SCORERS"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--enrich", metavar="SLUG", help="add the credits and MC values to a kept project"
    )
    args = parser.parse_args()
    if args.enrich:
        kept = Project.objects.get(slug=args.enrich)
        print(json.dumps(credits_and_mc_add(kept, "prm-0", args.seed)))
        return
    if args.measure:
        print(json.dumps(measure(args.measure[0], args.repeat, args.measure[1].split(","))))
        return
    if args.summaries:
        print(json.dumps(summaries(args.summaries[0], args.summaries[1].split(","))))
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    print(
        f"command: .venv/bin/python bench/growth.py --sizes {args.sizes} --big {args.big}"
        f" --repeat {args.repeat} --seed {args.seed}"
    )
    results = []
    projects = []
    try:
        with tempfile.TemporaryDirectory(prefix="growth-") as folder:
            for size in sizes:
                built = build(size, args.big, args.seed, Path(folder))
                projects.append(built["slug"])
                result = {"size": size, **built}
                for mode in ("--summaries", "--measure"):
                    child = subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--repeat",
                            str(args.repeat),
                            mode,
                            built["slug"],
                            ",".join(built["scorers"]),
                        ],
                        check=True,
                        stdout=subprocess.PIPE,
                        text=True,
                        cwd=ROOT,
                    )
                    result.update(json.loads(child.stdout.splitlines()[-1]))
                results.append(result)
                print(json.dumps(result), flush=True)
        first, last = results[0], results[-1]
        ratios = {
            name: round(last["ms"][name]["median"] / first["ms"][name]["median"], 2)
            for name in last["ms"]
            if name in first["ms"]
        }
        print(f"ratio of medians, {last['steps']:,} steps against {first['steps']:,}:")
        for name, ratio in sorted(ratios.items(), key=lambda item: -item[1]):
            flag = "" if ratio <= 1.5 else "   over 1.5x"
            print(
                f"  {name:22} {ratio:6.2f}x  ({first['ms'][name]['median']:.0f} -> "
                f"{last['ms'][name]['median']:.0f} ms){flag}"
            )
        print(json.dumps({"ratios": ratios, **sizes_on_disk()}))
    finally:
        if not args.keep:
            for slug in projects:
                project = Project.objects.filter(slug=slug).first()
                if project is not None:
                    project_drop(project)
                User.objects.filter(username=slug).delete()


if __name__ == "__main__":
    main()
