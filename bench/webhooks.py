"""Webhook delivery through an outage, with the real back-off: a receiver on loopback is
down for ``--down`` seconds (a minute by default) while events are emitted, the Celery
worker sending them is SIGKILLed once in the middle and another started, and beat's sweep
runs every 10 s (here, in this process). Afterwards every event must have reached the
receiver, each under one ``webhook-id`` (a repeat, if any, under the same id).

    .venv/bin/python bench/webhooks.py                    # 20 events, down 60 s
    .venv/bin/python bench/webhooks.py --events 50 --down 90

Runs against ``DATABASE_URL`` / ``CELERY_BROKER_URL`` (or the embedded servers) with the
default ``STEPSCOPE_WEBHOOK_RETRY_SECONDS`` (10, 30, 60, ...); loopback is allowed for the
receiver (``STEPSCOPE_WEBHOOK_ALLOW_PRIVATE=1`` here and in the workers). The workers
consume a queue of their own. Prints the command, the figures and a JSON line last; the
project is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
QUEUE = f"bench-webhooks-{secrets.token_hex(3)}"
os.environ["STEPSCOPE_WEBHOOK_ALLOW_PRIVATE"] = "1"
os.environ["STEPSCOPE_WEBHOOK_QUEUE"] = QUEUE
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import transaction  # noqa: E402

from automation.models import WebhookDelivery  # noqa: E402
from automation.services import webhook_create, webhooks_sweep  # noqa: E402
from bench.cleanup import project_drop  # noqa: E402
from stepscope.celery import app  # noqa: E402
from stepscope.events import event_emit  # noqa: E402
from trajectories.services import project_create  # noqa: E402

received: list[tuple[str, str]] = []  # (event id, webhook-id)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        received.append((body["event_id"], self.headers["webhook-id"]))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def worker(name: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "stepscope", "worker", "-Q", QUEUE,
         "--concurrency", "1", "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
         "--loglevel", "WARNING"],
        cwd=ROOT,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not app.control.ping(destination=[f"{name}@{socket.gethostname()}"], timeout=0.5):
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit(f"worker {name} did not start")
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--down", type=float, default=60.0, help="seconds the receiver is down")
    args = parser.parse_args()
    print("$ .venv/bin/python bench/webhooks.py " + " ".join(sys.argv[1:]), flush=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    run = secrets.token_hex(3)
    user = User.objects.create(username=f"bench-webhooks-{run}")
    project = project_create(slug=f"bench-webhooks-{run}", name="bench: webhooks")
    webhook, _ = webhook_create(
        project=project,
        name="down for a while",
        url=f"http://127.0.0.1:{port}/hook",
        events=["export.ready"],
        user=user,
    )
    first = worker(f"bench-hooks-a-{run}")
    second = None
    server = None
    started = time.monotonic()
    try:
        for n in range(args.events):
            with transaction.atomic():
                event_emit(project_id=project.pk, kind="export.ready", data={"n": n})
            time.sleep(args.down / 2 / args.events)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        print(f"{time.monotonic() - started:.0f} s: worker killed", flush=True)
        second = worker(f"bench-hooks-b-{run}")
        time.sleep(max(0.0, args.down - (time.monotonic() - started)))
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        up = time.monotonic()
        print(f"{up - started:.0f} s: receiver up", flush=True)
        deliveries = WebhookDelivery.objects.filter(webhook=webhook)
        while deliveries.exclude(status=WebhookDelivery.Status.DELIVERED).exists():
            if time.monotonic() - up > 600:
                raise SystemExit("not every delivery arrived within 10 minutes of the receiver")
            webhooks_sweep()  # what beat does every 10 s
            time.sleep(10)
        done = time.monotonic()
        attempts = sum(d.attempts for d in deliveries.all())
        failed = deliveries.filter(status=WebhookDelivery.Status.FAILED).count()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=60)
        if server is not None:
            server.shutdown()
        project_drop(project)
        user.delete()
    ids: dict[str, set[str]] = defaultdict(set)
    for event_id, message_id in received:
        ids[event_id].add(message_id)
    repeats = len(received) - len(set(received))
    lost = args.events - len(ids)
    two_ids = sum(len(found) > 1 for found in ids.values())
    print(
        f"{args.events} events, receiver down {args.down:.0f} s, one worker killed:"
        f" {len(ids)} reached it ({lost} lost), {two_ids} under two ids, {repeats} repeats"
        f" under their own id, {attempts} attempts, {failed} failed; all in"
        f" {done - up:.0f} s after the receiver came up"
    )
    print(
        json.dumps(
            {
                "events": args.events,
                "down_s": args.down,
                "reached": len(ids),
                "lost": lost,
                "two_ids": two_ids,
                "repeats": repeats,
                "attempts": attempts,
                "failed": failed,
                "delivered_after_up_s": round(done - up, 1),
            }
        )
    )
    if lost or two_ids or failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
