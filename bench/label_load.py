"""Label POST round trip under load: simulated annotators label steps through the real
HTTP path (login, CSRF, queue lease, HTMX label posts) against a server on loopback.

    .venv/bin/python bench/label_load.py                      # starts gunicorn itself
    .venv/bin/python bench/label_load.py --url http://127.0.0.1:8000   # a running server

It creates a project (``bench-labels-<time>``, deleted afterwards unless ``--keep``) with
annotators, trajectories and a queue
whose overlap equals the number of annotators, so every annotator labels every step of
the items they take: two annotators on one step, never overwriting each other. Each label
post is a distinct (step, annotator), so the database must end with exactly one label,
and one history event, per successful post. Prints requests/s and p50/p95/p99 latency,
then a final JSON line. Every loop is bounded; the run stops by itself.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402

from labeling.models import LabelSchema, StepLabel, StepLabelEvent  # noqa: E402
from labeling.services import queue_create  # noqa: E402
from tests.deployment.stack import Browserless, free_port  # noqa: E402
from trajectories.formats.base import ParsedStep  # noqa: E402
from trajectories.hashing import prefix_hashes  # noqa: E402
from trajectories.models import Membership, Project, Step, Trajectory  # noqa: E402
from trajectories.selection import TrajectoryFilters  # noqa: E402
from trajectories.services import project_create  # noqa: E402

PASSWORD = "bench-password-1"
REQUEST_TIMEOUT_S = 30


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def work(
    annotator: Browserless, queue_id: int, posts: int, result: Result, deadline: float
) -> None:
    """Take items from the queue and label their steps until ``posts`` labels are sent."""
    annotator.login()
    sent = 0
    values = ("1", "0", "-1")
    while sent < posts and time.monotonic() < deadline:
        status, headers, _ = annotator.request("POST", f"/q/{queue_id}/next/", {}, htmx=True)
        target = headers.get("hx-redirect", "")
        match = re.match(r"/t/(\d+)/", target)
        if status != 204 or not match:
            break  # nothing left
        trajectory = int(match[1])
        _, _, page = annotator.request("GET", target)
        steps = re.findall(r'data-row data-step="(\d+)"', page)
        schema = re.search(r'name="schema" value="(\d+)"', page)
        for n, step in enumerate(steps):
            if sent >= posts or time.monotonic() > deadline:
                break
            body = {"value": values[(n + len(annotator.username)) % 3], "queue": str(queue_id)}
            if schema:
                body["schema"] = schema[1]
            start = time.perf_counter()
            status, _, text = annotator.request("POST", f"/steps/{step}/label/", body, htmx=True)
            elapsed = time.perf_counter() - start
            with result.lock:
                result.latencies.append(elapsed)
                if status == 200:
                    result.ok += 1
                else:
                    result.failed += 1
                    result.errors.append(f"{status}: {text[:200]}")
            sent += 1
        annotator.request(
            "POST", f"/t/{trajectory}/submit/", {"queue": str(queue_id), "finish_reason": "give_up"}
        )


def make_trajectory(project: Project, number: int, steps: int) -> None:
    task = f"Bench task {number}"
    parsed = [
        ParsedStep(kind="thought", role="assistant", content=f"Step {n}: compute.", labelable=True)
        for n in range(steps)
    ]
    trajectory = Trajectory.objects.create(
        project=project,
        external_id=f"bench-{number}",
        source_format="stepscope",
        task=task,
        task_key=task,
        step_count=steps,
        content_hash=f"{project.slug}-{number}",
    )
    Step.objects.bulk_create(
        Step(
            trajectory=trajectory,
            index=n,
            kind=s.kind,
            role=s.role,
            content=s.content,
            labelable=True,
            prefix_hash=h,
        )
        for n, (s, h) in enumerate(zip(parsed, prefix_hashes(task, parsed), strict=True))
    )


def start_server(port: int, workers: int, threads: int) -> subprocess.Popen[bytes]:
    log = ROOT / ".stepscope" / "bench-label-server.log"
    log.parent.mkdir(exist_ok=True)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "stepscope.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return server
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"server exited; see {log}") from None
            time.sleep(0.3)
    server.kill()
    raise RuntimeError(f"server did not start; see {log}")


def percentile(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
        if len(values) > 1
        else values[0]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server; default: start gunicorn on loopback")
    parser.add_argument("--annotators", type=int, default=20)
    parser.add_argument("--posts", type=int, default=100, help="label posts per annotator")
    parser.add_argument("--steps", type=int, default=25, help="steps per trajectory")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=2, help="threads per gunicorn worker")
    parser.add_argument("--max-seconds", type=float, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the bench project afterwards")
    args = parser.parse_args()

    slug = f"bench-labels-{int(time.time())}"
    project = project_create(slug=slug, name=f"Bench labels {slug}")
    schema = LabelSchema.objects.get(project=project)
    trajectories = -(-args.posts // args.steps) + 1
    for number in range(trajectories):
        make_trajectory(project, number, args.steps)
    users = []
    for n in range(args.annotators):
        user = User.objects.create_user(f"{slug}-a{n:02d}", password=PASSWORD)
        Membership.objects.create(user=user, project=project, role=Membership.Role.ANNOTATOR)
        users.append(user)
    queue = queue_create(
        project=project,
        name="load",
        created_by=None,
        filters=TrajectoryFilters(),
        overlap=args.annotators,
        lease_seconds=3600,
    )

    server = None
    if args.url:
        parsed = urllib.parse.urlparse(args.url)
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    else:
        host, port = "127.0.0.1", free_port()
        server = start_server(port, args.workers, args.threads)
    assert host in ("127.0.0.1", "localhost", "::1"), "this benchmark only targets loopback"
    try:
        result = Result()
        deadline = time.monotonic() + args.max_seconds
        threads = [
            threading.Thread(
                target=work,
                args=(
                    Browserless(host, port, user.username, PASSWORD, timeout=REQUEST_TIMEOUT_S),
                    queue.pk,
                    args.posts,
                    result,
                    deadline,
                ),
            )
            for user in users
        ]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=args.max_seconds + 60)
        wall = time.perf_counter() - start
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)

    stored = StepLabel.objects.filter(schema=schema).count()
    events = StepLabelEvent.objects.filter(schema_id=schema.pk, pgh_label="insert").count()
    lat = sorted(result.latencies)
    summary = {
        "annotators": args.annotators,
        "label_posts_ok": result.ok,
        "label_posts_failed": result.failed,
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(lat) / wall, 1),
        "p50_ms": round(percentile(lat, 50) * 1000, 1),
        "p95_ms": round(percentile(lat, 95) * 1000, 1),
        "p99_ms": round(percentile(lat, 99) * 1000, 1),
        "labels_in_db": stored,
        "insert_events_in_db": events,
        "lost_labels": result.ok - stored,
        "workers": None if args.url else args.workers,
        "threads": None if args.url else args.threads,
        "cpus": os.cpu_count(),
    }
    print(
        f"label posts: {result.ok} ok, {result.failed} failed in {wall:.1f} s"
        f" with {args.annotators} annotators"
    )
    print(f"throughput: {summary['requests_per_s']} req/s")
    print(
        f"latency: p50 {summary['p50_ms']} ms, p95 {summary['p95_ms']} ms,"
        f" p99 {summary['p99_ms']} ms"
    )
    print(f"database: {stored} labels, {events} insert events, lost {result.ok - stored}")
    for error in result.errors[:5]:
        print("error:", error)
    print(json.dumps(summary))
    if not args.keep:
        project.delete()
        User.objects.filter(pk__in=[u.pk for u in users]).delete()
        StepLabelEvent.objects.filter(schema_id=schema.pk).delete()
    if stored != result.ok or events != result.ok or result.failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
