"""Does a rule slow a push? The same pushes (``POST /api/v1/imports/``, JSON records)
into two projects side by side, one with no rule (the baseline) and one with a rule that
fires on every push (an empty selection, rate 1, adding each trajectory to a queue),
while a real Celery worker runs the rule's task.

    .venv/bin/python bench/rules_push.py                       # 7 rounds x 10 pushes of 100
    .venv/bin/python bench/rules_push.py --rounds 9 --pushes 20 --records 200

The pushes go through Django's WSGI handler in this process (Django's test ``Client``:
the view, the serializer, the import's COPY, the commit and its on-commit hooks, the
broker message; no socket), against the PostgreSQL and Redis of ``DATABASE_URL`` /
``CELERY_BROKER_URL`` (or the embedded ones), with a worker started here on the same
database and broker. Each round pushes new trajectories into both projects, in a rotating
order. Reported: each round's median seconds per push on each side, then the median of
the rounds, the ratio rule / baseline and its range over the rounds; the worker's firings
are checked (one per trajectory pushed into the rule's project). Prints the command, the
figures and a JSON line last. The two projects are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.test import Client  # noqa: E402

from accounts.services import api_token_create  # noqa: E402
from automation.models import Rule, RuleFiring  # noqa: E402
from automation.services import rule_create, rules_arrived  # noqa: E402
from bench.cleanup import project_drop  # noqa: E402
from labeling.services import queue_create  # noqa: E402
from stepscope.celery import app  # noqa: E402
from trajectories.arrivals import Arrival  # noqa: E402
from trajectories.models import Membership, Trajectory  # noqa: E402
from trajectories.selection import TrajectoryFilters, selection_parse  # noqa: E402
from trajectories.services import project_create  # noqa: E402

HOOK_CALLS = 500


def records(tag: str, count: int, steps: int) -> list[dict[str, object]]:
    return [
        {
            "id": f"{tag}-{n}",
            "task": f"Add {n} and {tag}",
            "outcome": {"success": n % 2 == 0},
            "steps": [{"content": f"step {i} of {tag}-{n}: carry the digit"} for i in range(steps)],
        }
        for n in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pushes", type=int, default=10, help="pushes per project per round")
    parser.add_argument("--records", type=int, default=100, help="trajectories per push")
    parser.add_argument("--steps", type=int, default=10, help="steps per trajectory")
    args = parser.parse_args()
    print("$ .venv/bin/python bench/rules_push.py " + " ".join(sys.argv[1:]), flush=True)

    run = secrets.token_hex(3)
    user, _ = User.objects.get_or_create(username=f"bench-rules-{run}")
    baseline = project_create(slug=f"bench-norule-{run}", name="bench: no rule")
    ruled = project_create(slug=f"bench-rule-{run}", name="bench: a rule on every push")
    for project in (baseline, ruled):
        Membership.objects.create(user=user, project=project, role=Membership.Role.ADMIN)
    queue = queue_create(
        project=ruled,
        name="every push",
        created_by=user,
        filters=selection_parse({"task": "none-such"}),
    )
    rule = rule_create(
        project=ruled,
        name="every push",
        filters=TrajectoryFilters(),
        action=Rule.Action.QUEUE,
        queue=queue,
        user=user,
    )
    _, token = api_token_create(user=user, name="bench")
    client = Client(HTTP_AUTHORIZATION=f"Token {token}", HTTP_HOST="127.0.0.1")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "stepscope", "worker", "-Q", "default",
         "--concurrency", "1", "-n", f"bench-rules-{run}@%h", "--without-gossip",
         "--without-mingle", "--loglevel", "WARNING"],
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not app.control.ping(destination=[f"bench-rules-{run}@{os.uname().nodename}"]):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit("the worker did not start")
        sides = {"baseline": baseline, "rule": ruled}
        rounds: dict[str, list[float]] = {"baseline": [], "rule": []}
        for number in range(args.rounds):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for side in order:
                project = sides[side]
                seconds = []
                for push in range(args.pushes):
                    body = json.dumps(
                        {
                            "project": project.slug,
                            "trajectories": records(
                                f"{side}-{number}-{push}", args.records, args.steps
                            ),
                        }
                    )
                    started = time.perf_counter()
                    answer = client.post("/api/v1/imports/", body, content_type="application/json")
                    seconds.append(time.perf_counter() - started)
                    if answer.status_code != 201:
                        raise SystemExit(
                            f"push refused: {answer.status_code} {answer.content[:300]!r}"
                        )
                rounds[side].append(statistics.median(seconds))
            print(
                f"round {number + 1}: baseline {rounds['baseline'][-1] * 1000:.1f} ms/push,"
                f" rule {rounds['rule'][-1] * 1000:.1f} ms/push",
                flush=True,
            )
        # The hook's own cost, as a push pays it after its commit: the look for an active
        # rule and the message to the worker (an arrival of no trajectory: the worker's
        # task finds nothing to do), timed alone, away from the pushes' noise.
        hook_seconds = []
        for _ in range(HOOK_CALLS):
            started = time.perf_counter()
            rules_arrived(Arrival(ruled.pk, (), None, "bench"))
            hook_seconds.append(time.perf_counter() - started)
        pushed = Trajectory.objects.filter(project=ruled).count()
        deadline = time.monotonic() + 120
        while RuleFiring.objects.filter(rule=rule).count() < pushed:
            if time.monotonic() > deadline:
                raise SystemExit("the rule did not fire on every pushed trajectory")
            time.sleep(0.2)
        fired = RuleFiring.objects.filter(rule=rule).count()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        for project in (baseline, ruled):
            project_drop(project)
        user.delete()
    base = statistics.median(rounds["baseline"])
    with_rule = statistics.median(rounds["rule"])
    ratios = [r / b for r, b in zip(rounds["rule"], rounds["baseline"], strict=True)]
    print(
        f"push of {args.records} x {args.steps} steps, median of {args.rounds} rounds:"
        f" baseline {base * 1000:.1f} ms, with the rule {with_rule * 1000:.1f} ms;"
        f" ratio {with_rule / base:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f});"
        f" the worker fired the rule on {fired} of {pushed} trajectories"
    )
    hook = statistics.median(hook_seconds)
    print(
        f"the arrival hook alone (a rule to run): median {hook * 1000:.2f} ms"
        f" (p90 {statistics.quantiles(hook_seconds, n=10)[-1] * 1000:.2f} ms) over {HOOK_CALLS}"
        f" calls, {hook / base * 100:.2f}% of the baseline push"
    )
    print(
        json.dumps(
            {
                "baseline_ms": round(base * 1000, 2),
                "rule_ms": round(with_rule * 1000, 2),
                "ratio": round(with_rule / base, 4),
                "ratio_min": round(min(ratios), 4),
                "ratio_max": round(max(ratios), 4),
                "hook_ms": round(hook * 1000, 3),
                "fired": fired,
                "pushed": pushed,
            }
        )
    )


if __name__ == "__main__":
    main()
