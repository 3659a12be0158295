"""Writing one trajectory's step labels against Label Studio: each of N trajectories of
20 steps gets its 20 labels and its submit in one ``POST /api/v1/labels/bulk/``
(``"submit": true``), and the same 20 per-step ratings go to Label Studio as one
annotation of the task (``POST /api/tasks/<id>/annotations/``, a ``choices`` result per
step), side by side in one run. Stepscope is also timed with two schemas at once (40
labels a request), and a bare baseline takes the same requests.

    .venv/bin/python bench/label_bulk.py --label-studio /work/ls-venv/bin/label-studio
    .venv/bin/python bench/label_bulk.py --trajectories 100 --repeat 3 --label-studio ...

The servers are started as ``bench/push.py`` starts them (Stepscope under gunicorn, Label
Studio as ``label-studio start`` with its SQLite, the bare WSGI app under gunicorn), one
client, one request at a time, a new connection each. Each round labels fresh
trajectories on every side; the ways run in a rotating order. Prints each round's median
milliseconds per trajectory, then the medians over rounds with their ranges, the ratio
Label Studio / Stepscope (> 1: Stepscope is faster) and a JSON line last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

# Run as a script (``bench/label_bulk.py``), Python puts bench/ on the path, not the
# checkout: bench.push (which sets Django up) is found from the checkout's root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.push import (
    Bare,
    LabelStudio,
    Stepscope,
    chunks,
    get,
    make_records,
    post,
)
from labeling.services import label_schema_create
from trajectories.models import Trajectory

STEPS = 20
SEVERITY = [{"value": 1, "name": "minor", "key": "7"}, {"value": 2, "name": "major", "key": "8"}]
LS_CONFIG = (
    '<View><Text name="task" value="$task"/>'
    + "".join(
        f'<Choices name="s{n}" toName="task"><Choice value="good"/><Choice value="bad"/></Choices>'
        for n in range(STEPS)
    )
    + "</View>"
)


def ms_per_request(run: Callable[[int], object], count: int) -> float:
    """The median milliseconds of ``run(n)`` over ``n`` in ``range(count)``."""
    times = []
    for n in range(count):
        start = time.perf_counter()
        run(n)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


class StepscopeLabels:
    def __init__(self, server: Stepscope, schemas: int) -> None:
        self.server, self.schemas = server, schemas

    def prepare(self, count: int, seed: str) -> list[int]:
        project = self.server.project()
        self.extra = None
        if self.schemas > 1:
            self.extra = label_schema_create(
                project=project, name="severity", kind="ordinal", values=SEVERITY
            ).pk
        for chunk in chunks(make_records(count, STEPS, seed), 500):
            body = {"project": project.slug, "trajectories": chunk}
            status, text = post(self.server.port, "/api/v1/imports/", body, self.server.headers)
            if status != 201:
                raise RuntimeError(f"Stepscope push: {status} {text[:300]!r}")
        return list(
            Trajectory.objects.filter(project=project).order_by("pk").values_list("pk", flat=True)
        )

    def label(self, trajectory_id: int) -> None:
        labels: list[dict[str, Any]] = [
            {"trajectory": trajectory_id, "index": n, "value": 1 if n % 3 else -1}
            for n in range(STEPS)
        ]
        if self.extra is not None:
            labels += [
                {"trajectory": trajectory_id, "index": n, "value": 1 + n % 2, "schema": self.extra}
                for n in range(STEPS)
            ]
        body = {"labels": labels, "submit": True}
        status, text = post(self.server.port, "/api/v1/labels/bulk/", body, self.server.headers)
        if status != 200:
            raise RuntimeError(f"Stepscope labels: {status} {text[:300]!r}")


class LabelStudioLabels:
    def __init__(self, server: LabelStudio) -> None:
        self.server = server

    def prepare(self, count: int, seed: str) -> list[int]:
        body = {"title": f"bench {time.time()}", "label_config": LS_CONFIG}
        status, text = post(self.server.port, "/api/projects", body, self.server.headers)
        if status != 201:
            raise RuntimeError(f"Label Studio project: {status} {text[:300]!r}")
        project = int(json.loads(text)["id"])
        tasks = [{"data": {"task": r["task"]}} for r in make_records(count, STEPS, seed)]
        status, text = post(
            self.server.port, f"/api/projects/{project}/import", tasks, self.server.headers
        )
        if status != 201:
            raise RuntimeError(f"Label Studio import: {status} {text[:300]!r}")
        found = get(
            self.server.port,
            f"/api/tasks?project={project}&page_size={count}&fields=all",
            self.server.headers,
        )
        rows = found["tasks"] if isinstance(found, dict) else found
        return sorted(int(task["id"]) for task in rows)

    def label(self, task_id: int) -> None:
        result = [
            {
                "from_name": f"s{n}",
                "to_name": "task",
                "type": "choices",
                "value": {"choices": ["good" if n % 3 else "bad"]},
            }
            for n in range(STEPS)
        ]
        status, text = post(
            self.server.port,
            f"/api/tasks/{task_id}/annotations/",
            {"result": result},
            self.server.headers,
        )
        if status != 201:
            raise RuntimeError(f"Label Studio annotation: {status} {text[:300]!r}")


def _label_nth(way: Any, ids: list[int], n: int) -> None:
    way.label(ids[n])


def _bare_nth(port: int, body: dict[str, Any], n: int) -> None:
    post(port, "/", body, {})


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ms ({min(values):.1f}-{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--label-studio", default="", help="the label-studio command")
    args = parser.parse_args()
    print("command: .venv/bin/python bench/label_bulk.py", *sys.argv[1:])
    log_dir = Path(tempfile.mkdtemp(prefix="bench-label-bulk-"))
    results: dict[str, list[float]] = {}
    # Each server is stopped however the run ends, a peer that fails to start included.
    with contextlib.ExitStack() as servers:
        server = Stepscope(args.workers, log_dir, name="-labels")
        servers.callback(server.close)
        bare = Bare(args.workers, log_dir)
        servers.callback(bare.close)
        studio = LabelStudio(args.label_studio, log_dir) if args.label_studio else None
        if studio is not None:
            servers.callback(studio.close)
        ways: dict[str, Any] = {
            "stepscope": StepscopeLabels(server, 1),
            "stepscope_two_schemas": StepscopeLabels(server, 2),
        }
        if studio is not None:
            ways["label_studio"] = LabelStudioLabels(studio)
        results = {name: [] for name in [*ways, "bare"]}
        server.warm()
        bare.warm()
        for round_number in range(args.repeat):
            names = list(ways)
            order = names[round_number % len(names) :] + names[: round_number % len(names)]
            for name in order:
                way = ways[name]
                ids = way.prepare(args.trajectories, f"r{round_number}-{name}")
                if round_number == 0:
                    way.label(ids.pop())  # warm this side's first request
                results[name].append(ms_per_request(partial(_label_nth, way, ids), len(ids)))
            labels = {"labels": [{"trajectory": 1, "index": n, "value": 1} for n in range(STEPS)]}
            bare_post = partial(_bare_nth, bare.port, labels)
            results["bare"].append(ms_per_request(bare_post, args.trajectories - 1))
            print(
                f"round {round_number + 1}: "
                + ", ".join(f"{name} {values[-1]:.1f} ms" for name, values in results.items()),
                flush=True,
            )
    figures: dict[str, Any] = {
        name: round(statistics.median(values), 2) for name, values in results.items() if values
    }
    for name, values in results.items():
        if values:
            print(f"{name}: {spread(values)} a trajectory (20 labels and the submit)")
    if studio is not None:
        ratios = [
            ls / ours
            for ls, ours in zip(results["label_studio"], results["stepscope"], strict=True)
        ]
        figures["ratio_label_studio_over_stepscope"] = round(statistics.median(ratios), 2)
        figures["ratio_range"] = [round(min(ratios), 2), round(max(ratios), 2)]
        figures["label_studio_version"] = studio.version
        print(
            f"Label Studio / Stepscope: {statistics.median(ratios):.2f}x"
            f" ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    two = [
        a / b for a, b in zip(results["stepscope_two_schemas"], results["stepscope"], strict=True)
    ]
    figures["two_schemas_over_one"] = round(statistics.median(two), 2)
    print(f"two schemas / one: {statistics.median(two):.2f}x")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
