"""The whole system under load: simulated annotators label through gunicorn for minutes
while a scoring run (gpu queue) and an export (default queue) run beside them.

    .venv/bin/python bench/load.py                         # 50 annotators, 5 minutes
    .venv/bin/python bench/load.py --annotators 10 --seconds 30
    .venv/bin/python bench/load.py --worker-nice 0          # workers at the web's priority
    .venv/bin/python bench/load.py --think 3                # an annotator reads for ~3 s
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/stepscope_load \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/5 .venv/bin/python bench/load.py

Stepscope runs as deployed (tests/deployment/stack.py: gunicorn plus one Celery worker
per queue, settings from the environment) on private embedded servers in a temporary
directory, or on the servers in DATABASE_URL / CELERY_BROKER_URL (the database is
created and dropped). Each annotator is a thread with its own keep-alive connection:
login, CSRF, queue lease, HTMX label posts, submit, as the browser does. The queue's
overlap equals the number of annotators, so every post is a distinct (annotator, step).

By default an annotator posts its next label as soon as the last one is answered (a
closed loop with no think time): then the mean latency is the number of annotators over
the throughput (Little's law), whatever the priorities, and 50 annotators on 2 cores
queue behind each other. ``--think S`` has each one read the step for a while first, S
seconds on average (exponentially distributed, seeded per annotator), as a person does:
that measures how long a label write takes when the machine is shared, not how long the
queue of posts is.

Prints labels/s, p50/p95/p99 latency, errors, the scoring and export figures, checks that
every acknowledged label is in the database, then a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.deployment.stack import Browserless, Stack  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

PASSWORD = "load-password-1"

SETUP = """
from pathlib import Path
from django.contrib.auth.models import User
from labeling.models import LabelSchema
from labeling.services import queue_create
from scoring.models import Scorer
from scoring.prm import tiny
from scoring.services import scoring_run_start
from trajectories import synthetic
from trajectories.models import Membership, Project
from trajectories.selection import TrajectoryFilters
from trajectories.services import project_create, trajectory_import

owner = User.objects.create_user("owner", password=PASSWORD)
labels = project_create(slug="load", name="Load", owner=owner)
records = synthetic.rollouts(tasks=ANNOTATORS, rollouts_per_task=4, steps_per_task=24, seed=1)
path = Path(WORKDIR) / "labels.jsonl"
synthetic.write_jsonl(path, records)
trajectory_import(project=labels, source_format="stepscope", path=path)
for n in range(ANNOTATORS):
    user = User.objects.create_user(f"ann{n:02d}", password=PASSWORD)
    Membership.objects.create(user=user, project=labels, role=Membership.Role.ANNOTATOR)
queue = queue_create(
    project=labels, name="load", created_by=owner, filters=TrajectoryFilters(),
    overlap=ANNOTATORS, lease_seconds=3600,
)

# The background work: a project of SCORED_TASKS x 4 rollouts to score and to export.
work = project_create(slug="work", name="Work", owner=owner)
path = Path(WORKDIR) / "work.jsonl"
synthetic.write_jsonl(path, synthetic.rollouts(tasks=SCORED_TASKS, seed=2))
trajectory_import(project=work, source_format="stepscope", path=path)
# Inside the operator's model directories, where the workers may load models from.
from django.conf import settings
model = tiny.save_token_classifier(
    Path(settings.STEPSCOPE_MODEL_DIRS[0]) / "load-prm", layers=4, hidden=256
)
scorer = Scorer.objects.create(
    project=work, name="load-prm", kind=prm.TOKEN_CLASSIFICATION,
    model_ref=str(model), parameters={"chunk_steps": 512, "batch_size": 16},
)
result = {
    "queue": queue.pk,
    "schema": LabelSchema.objects.get(project=labels).pk,
    "scorer": scorer.pk,
}
"""

START_BACKGROUND = """
from django.contrib.auth.models import User
from scoring.models import Scorer
from scoring.services import scoring_run_start
from trajectories.models import Project
from exports.services import export_plan_build, export_start

owner = User.objects.get(username="owner")
work = Project.objects.get(slug="work")
run = scoring_run_start(project=work, scorer=Scorer.objects.get(pk=SCORER), user=owner)
job = export_start(
    plan=export_plan_build(
        project=work, format="rl", labels="import:synthetic-truth", neutral="keep"
    ),
    user=owner,
)
result = {"run": run.pk, "export": job.pk}
"""

BACKGROUND_STATE = """
from scoring.models import ScoringRun
from exports.models import ExportJob

run = ScoringRun.objects.get(pk=RUN)
job = ExportJob.objects.get(pk=EXPORT)
result = {
    "scoring": {"status": run.status, "done": run.done, "total": run.total,
                "seconds": (run.finished_at - run.started_at).total_seconds()
                if run.finished_at and run.started_at else None, "error": run.error,
                "window": [run.started_at.timestamp() if run.started_at else None,
                           run.finished_at.timestamp() if run.finished_at else None]},
    "export": {"status": job.status, "rows": job.row_count, "error": job.error,
               "seconds": (job.finished_at - job.created_at).total_seconds()
               if job.finished_at else None},
}
"""

STORED = """
from labeling.models import StepLabel, StepLabelEvent
# The annotators' labels only: the imported ground truth shares the schema.
labels = StepLabel.objects.filter(schema_id=SCHEMA, annotator__username__startswith="ann")
annotators = list(labels.values_list("annotator_id", flat=True).distinct())
events = StepLabelEvent.objects.filter(
    schema_id=SCHEMA, pgh_label="insert", annotator_id__in=annotators
)
result = {
    "pairs": sorted([l.annotator.username, l.step_id] for l in labels.select_related("annotator")),
    "insert_events": events.count(),
}
"""


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    # When each post was sent (epoch seconds), beside its latency.
    sent: list[float] = field(default_factory=list)
    acknowledged: set[tuple[str, int]] = field(default_factory=set)
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def annotate(
    stack: Stack,
    name: str,
    queue: int,
    schema: int,
    deadline: float,
    tally: Tally,
    think: float,
) -> None:
    user = Browserless("127.0.0.1", stack.port, name, PASSWORD, timeout=60)
    reading = random.Random(name)
    user.login()
    while time.monotonic() < deadline:
        status, headers, _ = user.request("POST", f"/q/{queue}/next/", {}, htmx=True)
        target = headers.get("hx-redirect", "")
        if status != 204 or not target.startswith("/t/"):
            with tally.lock:
                tally.errors.append(f"lease: {status}")
            return
        _, _, page = user.request("GET", target)
        for step in map(int, re.findall(r'data-row data-step="(\d+)"', page)):
            if think > 0:
                # Reading the step: the annotator's think time (a load model, not a wait
                # for the server).
                time.sleep(reading.expovariate(1 / think))
            if time.monotonic() >= deadline:
                return
            body = {"value": ("1", "0", "-1")[step % 3], "schema": str(schema), "queue": str(queue)}
            sent = time.time()
            started = time.perf_counter()
            try:
                status, _, text = user.request("POST", f"/steps/{step}/label/", body, htmx=True)
            except OSError as error:
                status, text = 0, str(error)
            elapsed = time.perf_counter() - started
            with tally.lock:
                tally.latencies.append(elapsed)
                tally.sent.append(sent)
                if status == 200:
                    tally.acknowledged.add((name, step))
                else:
                    tally.failed += 1
                    tally.errors.append(f"{status}: {text[:200]}")
        trajectory = target.split("/")[2]
        user.request(
            "POST", f"/t/{trajectory}/submit/", {"queue": str(queue), "finish_reason": "give_up"}
        )


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def fill(code: str, **values: object) -> str:
    for key, value in values.items():
        code = code.replace(key, repr(value) if isinstance(value, str) else str(value))
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--web-workers", type=int, default=4, help="gunicorn processes")
    parser.add_argument("--scored-tasks", type=int, default=300, help="x4 rollouts x7 steps")
    parser.add_argument(
        "--worker-nice", type=int, default=10, help="workers' niceness (0: as the web)"
    )
    parser.add_argument(
        "--think",
        type=float,
        default=0.0,
        help="mean seconds an annotator reads a step before labelling it (0: none)",
    )
    args = parser.parse_args()
    print("command:", " ".join([".venv/bin/python", "bench/load.py", *sys.argv[1:]]))

    root = Path(tempfile.mkdtemp(prefix="ss-load-", dir="/tmp"))
    database_url = os.environ.get("DATABASE_URL", "")
    created_db = ""
    if database_url:
        import psycopg

        base = database_url.rsplit("/", 1)[0]
        created_db = f"stepscope_load_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(base + "/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{created_db}"')
        database_url = f"{base}/{created_db}"
    stack = Stack(
        root,
        database_url=database_url,
        broker_url=os.environ.get("CELERY_BROKER_URL", ""),
        web_workers=args.web_workers,
        worker_nice=args.worker_nice,
    )
    try:
        print(f"starting the stack in {root} ...", flush=True)
        stack.up()
        stack.wait_ready()
        setup = stack.django(
            fill(
                SETUP,
                PASSWORD=PASSWORD,
                ANNOTATORS=args.annotators,
                SCORED_TASKS=args.scored_tasks,
                WORKDIR=str(root),
            )
        )
        background = stack.django(fill(START_BACKGROUND, SCORER=setup["scorer"]))
        tally = Tally()
        deadline = time.monotonic() + args.seconds
        threads = [
            threading.Thread(
                target=annotate,
                args=(
                    stack,
                    f"ann{n:02d}",
                    setup["queue"],
                    setup["schema"],
                    deadline,
                    tally,
                    args.think,
                ),
            )
            for n in range(args.annotators)
        ]
        print(f"{args.annotators} annotators labelling for {args.seconds:.0f} s ...", flush=True)
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=args.seconds + 120)
        wall = time.perf_counter() - started
        state_code = fill(BACKGROUND_STATE, RUN=background["run"], EXPORT=background["export"])
        wait_until(
            lambda: all(
                v["status"] not in ("queued", "running") for v in stack.django(state_code).values()
            ),
            timeout=600,
            poll=5,
        )
        state = stack.django(state_code)
        stored = stack.django(fill(STORED, SCHEMA=setup["schema"]))
    finally:
        stack.down()
        shutil.rmtree(root, ignore_errors=True)
        if created_db:
            import psycopg

            with psycopg.connect(base + "/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{created_db}" WITH (FORCE)')

    pairs = {(name, step) for name, step in stored["pairs"]}
    lost = tally.acknowledged - pairs
    latencies = sorted(tally.latencies)
    # The posts sent while the scoring run ran: the annotators' share of a busy machine.
    start_at, end_at = state["scoring"].pop("window")
    busy = sorted(
        latency
        for latency, sent in zip(tally.latencies, tally.sent, strict=True)
        if start_at is not None and start_at <= sent <= (end_at or float("inf"))
    )
    summary = {
        "annotators": args.annotators,
        "seconds": round(wall, 1),
        "label_posts": len(latencies),
        "labels_acknowledged": len(tally.acknowledged),
        "labels_per_s": round(len(tally.acknowledged) / wall, 1),
        "p50_ms": round(percentile(latencies, 50) * 1000, 1),
        "p95_ms": round(percentile(latencies, 95) * 1000, 1),
        "p99_ms": round(percentile(latencies, 99) * 1000, 1),
        "while_scoring": {
            "label_posts": len(busy),
            "p50_ms": round(percentile(busy, 50) * 1000, 1),
            "p95_ms": round(percentile(busy, 95) * 1000, 1),
            "p99_ms": round(percentile(busy, 99) * 1000, 1),
        },
        "errors": tally.failed + len([e for e in tally.errors if e.startswith("lease")]),
        "labels_in_db": len(pairs),
        "insert_events_in_db": stored["insert_events"],
        "acknowledged_but_missing": len(lost),
        "scoring": state["scoring"],
        "export": state["export"],
        "web_workers": args.web_workers,
        "worker_nice": args.worker_nice,
        "think_s": args.think,
        "cpus": os.cpu_count(),
        "servers": "external" if database_url else "embedded",
    }
    print(
        f"labels: {summary['labels_acknowledged']} acknowledged in {wall:.0f} s"
        f" = {summary['labels_per_s']}/s; latency p50 {summary['p50_ms']} ms,"
        f" p95 {summary['p95_ms']} ms, p99 {summary['p99_ms']} ms; errors {summary['errors']}"
    )
    scoring = summary["while_scoring"]
    print(
        f"while the scoring run ran: {scoring['label_posts']} posts, p50 {scoring['p50_ms']} ms,"
        f" p95 {scoring['p95_ms']} ms, p99 {scoring['p99_ms']} ms"
    )
    print(
        f"database: {len(pairs)} labels, {stored['insert_events']} insert events;"
        f" acknowledged but missing: {len(lost)}"
    )
    print(f"scoring run: {state['scoring']}")
    print(f"export: {state['export']}")
    for error in tally.errors[:5]:
        print("error:", error)
    print(json.dumps(summary))
    if lost or summary["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
