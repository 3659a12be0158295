"""Push speed against Label Studio: the same trajectories pushed as JSON through
Stepscope's ``POST /api/v1/imports/`` (by hand and through the Python client in
``client/``) and through Label Studio's import API, side by side in one run.

    .venv/bin/python bench/push.py                        # 2,000 x 20 steps, 3 rounds
    .venv/bin/python bench/push.py --repeat 5 --trajectories 2000 --steps 20
    .venv/bin/python bench/push.py --label-studio /work/ls-venv/bin/label-studio
    .venv/bin/python bench/push.py --floor --before /work/before   # + the floor, a baseline

Both servers run on loopback: Stepscope under gunicorn (as deployed, sync workers),
Label Studio as ``label-studio start`` does it, with its default SQLite in a temporary
data folder (deleted afterwards). Label Studio comes from PyPI in a virtual environment of
its own (it pins many packages): ``python3.11 -m venv /work/ls-venv &&
/work/ls-venv/bin/pip install label-studio==1.23.2``. A bare baseline takes the same
requests too: a WSGI app under the same gunicorn that reads each body and answers 201
(``bench/bare_wsgi.py``), which bounds what any server could reach with this client.
``--floor`` adds the database's share alone (the same rows prepared before the clock
starts, written with the import's COPY statements, a transaction per request): with the
bare baseline, what a Stepscope that spent no time in Python could reach.

One client, one request at a time, a new connection for each (``Connection: close``);
all get the data in requests of ``--chunk`` trajectories (the client's default, 500).
Every round pushes into a new project on each side, so every trajectory is new, and
checks afterwards that each side stored all of it. The ways run in a rotating order.
Prints each round, then medians and ranges, the ratio Label Studio seconds / Stepscope
seconds (> 1: Stepscope is faster) and Label Studio's over the bare baseline's, the CPU
of Stepscope's push split between its web process and PostgreSQL (with the least time
the two could take on this machine's cores however well they overlapped), and a JSON
line last.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "client"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django  # noqa: E402

django.setup()

import psutil  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402
from stepscope_client import Client  # noqa: E402

from accounts.services import api_token_create  # noqa: E402
from tests.deployment.stack import free_port  # noqa: E402
from trajectories import pgcopy, prepare  # noqa: E402
from trajectories.formats import stepscope_typed  # noqa: E402
from trajectories.models import ImportBatch, Project, ProjectDeletion, Step, Trajectory  # noqa: E402
from trajectories.services import import_writer, project_create, project_deletion_run  # noqa: E402

WORDS = ("we", "compute", "the", "total", "then", "subtract", "the", "remaining", "amount")
LABEL_CONFIG = '<View><Text name="task" value="$task"/><Choices name="ok" toName="task">' + (
    '<Choice value="good"/><Choice value="bad"/></Choices></View>'
)
# Label Studio migrates a fresh SQLite on its first start: more than 180 s on a loaded
# two-core machine (load 15).
START_TIMEOUT_S = 600


def make_records(count: int, steps: int, seed: str) -> list[dict[str, Any]]:
    """``count`` Stepscope records of ``steps`` steps (about 80 characters each)."""
    records = []
    for n in range(count):
        step_list = []
        for s in range(steps):
            words = " ".join(WORDS[(n + s + k) % len(WORDS)] for k in range(14))
            step_list.append(
                {
                    "kind": "thought" if s % 2 else "message",
                    "role": "assistant",
                    "content": f"Step {s}: {words}.",
                    "metadata": {"tokens": 20 + s},
                }
            )
        records.append(
            {
                "id": f"{seed}-{n}",
                "task": f"Task {n}: what is {n} + {n}?",
                "model": "bench-model",
                "outcome": {"reward": float(n % 2), "success": bool(n % 2)},
                "metadata": {"n": n},
                "steps": step_list,
            }
        )
    return records


def post(port: int, path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes]:
    """One request on a new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        connection.request(
            "POST",
            path,
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Connection": "close", **headers},
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def get(port: int, path: str, headers: dict[str, str]) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers={"Connection": "close", **headers})
        response = connection.getresponse()
        text = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {text[:300]!r}")
        return json.loads(text)
    finally:
        connection.close()


def chunks(records: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [records[i : i + size] for i in range(0, len(records), size)]


def wait_port(port: int, process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited; see {log}") from None
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"{what} did not start in {START_TIMEOUT_S} s; see {log}")


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a server process and its children so far."""
    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def postgres_cpu() -> float:
    """CPU seconds of Stepscope's PostgreSQL so far: the postmaster, its live backends, and
    the backends it has reaped (a connection a request opened and closed)."""
    data = str(settings.DATA_DIR)
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if process.info["name"] in ("postgres", "postmaster") and data in cmdline:
            times = process.cpu_times()
            return times.children_user + times.children_system + tree_cpu(process.pid)
    return float("nan")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Stepscope:
    def __init__(self, workers: int, log_dir: Path, root: Path = ROOT, name: str = "") -> None:
        self.port = free_port()
        self.tag = f"bench-push-{int(time.time())}{name}"
        self.user = User.objects.create_user(self.tag, password=secrets.token_hex(8))
        _, self.token = api_token_create(user=self.user, name="bench")
        self.headers = {"Authorization": f"Token {self.token}"}
        self.log = log_dir / f"stepscope{name}.log"
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "stepscope.wsgi"),
                *("--bind", f"127.0.0.1:{self.port}", "--workers", str(workers)),
                *("--log-level", "warning", "--timeout", "300"),
            ],
            cwd=root,
            # An earlier checkout uses this one's database (its data folder).
            env={**os.environ, "STEPSCOPE_DATA_DIR": str(settings.DATA_DIR)},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port, self.process, self.log, "gunicorn")
        self.projects: list[Project] = []

    def project(self) -> Project:
        slug = f"{self.tag}-{len(self.projects)}"
        project = project_create(slug=slug, name=slug, owner=self.user)
        self.projects.append(project)
        return project

    def warm(self) -> None:
        # Each gunicorn worker imports lazily on its first requests; warm them all.
        project = self.project()
        for n in range(8):
            record = make_records(1, 2, f"warm-{n}")
            body = {"project": project.slug, "trajectories": record}
            status, text = post(self.port, "/api/v1/imports/", body, self.headers)
            if status != 201:
                raise RuntimeError(f"Stepscope warm-up push: {status} {text[:300]!r}")

    def push_http(self, records: list[dict[str, Any]], size: int) -> float:
        project = self.project()
        start = time.perf_counter()
        for chunk in chunks(records, size):
            body = {"project": project.slug, "trajectories": chunk}
            status, text = post(self.port, "/api/v1/imports/", body, self.headers)
            if status != 201:
                raise RuntimeError(f"Stepscope push: {status} {text[:300]!r}")
        elapsed = time.perf_counter() - start
        self.check(project, records)
        return elapsed

    def push_client(self, records: list[dict[str, Any]], size: int) -> float:
        project = self.project()
        start = time.perf_counter()
        # The client's own requests; gunicorn's sync workers close every connection.
        with Client(f"http://127.0.0.1:{self.port}", self.token, timeout=300) as client:
            result = client.push_trajectories(project.slug, records, chunk_size=size)
        elapsed = time.perf_counter() - start
        if result.created != len(records):
            raise RuntimeError(f"client push created {result.created} of {len(records)}")
        self.check(project, records)
        return elapsed

    def check(self, project: Project, records: list[dict[str, Any]]) -> None:
        stored = Trajectory.objects.filter(project=project).count()
        steps = Step.objects.filter(trajectory__project=project).count()
        want = sum(len(r["steps"]) for r in records)
        if (stored, steps) != (len(records), want):
            raise RuntimeError(f"Stepscope stored {stored} / {steps}, not {len(records)} / {want}")

    def close(self) -> None:
        stop(self.process)
        for project in self.projects:
            # The batched deletion (Django's cascade of 40,000 steps took minutes).
            deletion = ProjectDeletion.objects.create(
                project=project, slug=project.slug, name=project.name
            )
            project_deletion_run(deletion_id=deletion.pk)
            deletion.delete()
        self.user.delete()


class DatabaseFloor:
    """What PostgreSQL alone takes to store a push: the rows the import would write for
    each request, prepared before the clock starts (no HTTP, no decoding, hashing or
    encoding), written with the import's two COPY statements, one transaction per request,
    with the foreign-key triggers skipped as the import skips them. Added to the bare
    baseline, it bounds what any Stepscope with this schema could reach on this machine."""

    def __init__(self, stepscope: Stepscope) -> None:
        self.stepscope = stepscope

    def warm(self) -> None:
        self.push(make_records(2, 2, "warm-floor"), 2)

    def push(self, records: list[dict[str, Any]], size: int) -> float:
        project = self.stepscope.project()
        batch = ImportBatch.objects.create(
            project=project, file_name="floor", source_format="stepscope"
        )
        head = f"\t{project.pk}\t{batch.pk}\tstepscope\t{timezone.now().isoformat()}\t"
        sequence = import_writer.trajectory_sequence()
        requests: list[tuple[bytes, str]] = []
        for chunk in chunks(records, size):
            decoded = stepscope_typed.push_decode(json.dumps({"trajectories": chunk}).encode())
            if decoded is None:
                raise RuntimeError("the typed reader did not take the bench's records")
            ready = [prepare.prepared(record, "stepscope") for record in decoded[1]]
            if not all(isinstance(item, prepare.Prepared) for item in ready):
                raise RuntimeError("the bench's records could not be prepared")
            prepared = cast(list[prepare.Prepared], ready)
            ids = import_writer.ids_allocate(sequence, len(prepared))
            steps = b"".join(
                pgcopy.first_column_filled(item.steps, pk)
                for pk, item in zip(ids, prepared, strict=True)
            )
            rows = "".join(
                f"{pk}{head}{item.fields}" for pk, item in zip(ids, prepared, strict=True)
            )
            requests.append((steps, rows))
        start = time.perf_counter()
        for steps, rows in requests:
            with transaction.atomic(), connection.cursor() as wrapper:
                wrapper.execute("SET LOCAL session_replication_role = replica")
                with wrapper.cursor.copy(
                    f"COPY trajectories_step ({pgcopy.STEP_COLUMNS}) FROM STDIN"
                ) as copy:
                    copy.write(steps)
                with wrapper.cursor.copy(
                    f"COPY trajectories_trajectory ({import_writer.TRAJECTORY_COLUMNS}) FROM STDIN"
                ) as copy:
                    copy.write(rows)
        elapsed = time.perf_counter() - start
        self.stepscope.check(project, records)
        return elapsed

    def close(self) -> None:
        pass  # its projects are the Stepscope server's, removed with them


class Bare:
    """The floor: the same requests to a WSGI app that reads each body and answers 201
    (``bench/bare_wsgi.py``), under the same gunicorn: what is left of a push when
    nothing is parsed or stored."""

    def __init__(self, workers: int, log_dir: Path) -> None:
        self.port = free_port()
        self.log = log_dir / "bare.log"
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "bench.bare_wsgi"),
                *("--bind", f"127.0.0.1:{self.port}", "--workers", str(workers)),
                *("--log-level", "warning", "--timeout", "300"),
            ],
            cwd=ROOT,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port, self.process, self.log, "gunicorn (bare)")

    def warm(self) -> None:
        post(self.port, "/", {"trajectories": make_records(1, 2, "warm")}, {})

    def push(self, records: list[dict[str, Any]], size: int) -> float:
        start = time.perf_counter()
        for chunk in chunks(records, size):
            status, text = post(self.port, "/", {"project": "p", "trajectories": chunk}, {})
            if status != 201:
                raise RuntimeError(f"bare push: {status} {text[:300]!r}")
        return time.perf_counter() - start

    def close(self) -> None:
        stop(self.process)


class LabelStudio:
    def __init__(self, command: str, log_dir: Path) -> None:
        self.port = free_port()
        self.data = Path(tempfile.mkdtemp(prefix="ls-bench-"))
        self.token = secrets.token_hex(20)
        env = {
            **os.environ,
            "LABEL_STUDIO_BASE_DATA_DIR": str(self.data),
            "LABEL_STUDIO_USERNAME": "bench@example.com",
            "LABEL_STUDIO_PASSWORD": secrets.token_hex(8),
            "LABEL_STUDIO_USER_TOKEN": self.token,
            "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
            "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
        }
        for name in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "VIRTUAL_ENV", "PYTHONPATH"):
            env.pop(name, None)
        self.log = log_dir / "label-studio.log"
        self.process = subprocess.Popen(
            [
                *(command, "start", "--no-browser", "--host", "127.0.0.1"),
                *("--port", str(self.port), "--data-dir", str(self.data)),
            ],
            cwd=self.data,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait_port(self.port, self.process, self.log, "label-studio")
        self.headers = {"Authorization": f"Token {self.token}"}
        self.version = self.wait_api()

    def wait_api(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                return str(get(self.port, "/api/version", self.headers).get("release", "?"))
            except (OSError, RuntimeError, ValueError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    message = f"Label Studio's API did not answer; see {self.log}"
                    raise RuntimeError(message) from None
                time.sleep(0.5)

    def project(self) -> int:
        body = {"title": f"bench {time.time()}", "label_config": LABEL_CONFIG}
        status, text = post(self.port, "/api/projects", body, self.headers)
        if status != 201:
            raise RuntimeError(f"Label Studio project: {status} {text[:300]!r}")
        return int(json.loads(text)["id"])

    def warm(self) -> None:
        project = self.project()
        for _ in range(4):
            tasks = [{"data": r} for r in make_records(1, 2, "warm")]
            post(self.port, f"/api/projects/{project}/import", tasks, self.headers)

    def push(self, records: list[dict[str, Any]], size: int) -> float:
        project = self.project()
        start = time.perf_counter()
        for chunk in chunks(records, size):
            tasks = [{"data": record} for record in chunk]
            status, text = post(self.port, f"/api/projects/{project}/import", tasks, self.headers)
            if status != 201:
                raise RuntimeError(f"Label Studio import: {status} {text[:300]!r}")
        elapsed = time.perf_counter() - start
        stored = get(self.port, f"/api/projects/{project}", self.headers)["task_number"]
        if stored != len(records):
            raise RuntimeError(f"Label Studio stored {stored} tasks, not {len(records)}")
        return elapsed

    def close(self) -> None:
        stop(self.process)
        shutil.rmtree(self.data, ignore_errors=True)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--chunk", type=int, default=500, help="trajectories per request")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument(
        "--label-studio",
        default=shutil.which("label-studio") or "/work/ls-venv/bin/label-studio",
        help="the label-studio command of its own virtual environment",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time the database's share alone: the rows prepared beforehand, COPY only",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of an earlier Stepscope (git archive) also pushed to, as a baseline",
    )
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    # A SIGTERM (timeout, kill) ends the run through the finally below: servers stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    log_dir = Path(tempfile.mkdtemp(prefix="bench-push-logs-"))
    servers: list[Stepscope | DatabaseFloor | Bare | LabelStudio] = []
    try:
        stepscope = Stepscope(args.workers, log_dir)
        servers.append(stepscope)
        ways: dict[str, Callable[[list[dict[str, Any]]], float]] = {
            "stepscope_http": lambda r: stepscope.push_http(r, args.chunk),
            "stepscope_client": lambda r: stepscope.push_client(r, args.chunk),
        }
        if args.before:
            before = Stepscope(args.workers, log_dir, root=args.before.resolve(), name="-before")
            servers.append(before)
            ways["before_http"] = lambda r: before.push_http(r, args.chunk)
        if args.floor:
            database_floor = DatabaseFloor(stepscope)
            servers.append(database_floor)
            ways["database_floor"] = lambda r: database_floor.push(r, args.chunk)
        bare = Bare(args.workers, log_dir)
        servers.append(bare)
        ways["bare_http"] = lambda r: bare.push(r, args.chunk)
        label_studio = LabelStudio(args.label_studio, log_dir)
        servers.append(label_studio)
        ways["label_studio"] = lambda r: label_studio.push(r, args.chunk)
        print(f"Label Studio {label_studio.version}, Stepscope gunicorn x{args.workers}")
        for server in servers:
            server.warm()
        names = list(ways)
        times: dict[str, list[float]] = {name: [] for name in names}
        # CPU seconds of the server side of each way: the web processes, and for
        # Stepscope its PostgreSQL too (Label Studio's SQLite runs inside its process).
        pid = {name: stepscope.process.pid for name in names if name.startswith("stepscope")}
        pid["label_studio"] = label_studio.process.pid
        pid["bare_http"] = bare.process.pid
        if args.before:
            pid["before_http"] = before.process.pid
        cpu: dict[str, list[float]] = {name: [] for name in names}
        cpu_database: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(args.repeat):
            turn = round_ % len(names)
            for name in names[turn:] + names[:turn]:
                records = make_records(args.trajectories, args.steps, f"r{round_}-{name}")
                database = name.startswith(("stepscope", "before", "database"))
                # The floor's server is its PostgreSQL alone (this process prepares).
                web = pid.get(name)
                web_before = tree_cpu(web) if web else 0.0
                database_before = postgres_cpu() if database else 0.0
                times[name].append(ways[name](records))
                web_used = (tree_cpu(web) if web else 0.0) - web_before
                database_used = (postgres_cpu() if database else 0.0) - database_before
                cpu[name].append(web_used + database_used)
                cpu_database[name].append(database_used)
            print(
                f"round {round_ + 1}: "
                + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in names),
                flush=True,
            )
    finally:
        for server in servers:
            server.close()

    size = f"{args.trajectories} x {args.steps} steps in requests of {args.chunk}"
    print(f"\n{size}, {args.repeat} rounds, median (range):")
    for name in names:
        print(f"  {name:18} {spread(times[name])}, server CPU {spread(cpu[name])}")
    ls_times = times["label_studio"]
    ratios = {
        name: statistics.median(ls_times) / statistics.median(times[name])
        for name in names
        if name not in ("label_studio", "bare_http", "database_floor")
    }
    # The most any implementation on this client, server and transfer could reach.
    floor = statistics.median(ls_times) / statistics.median(times["bare_http"])
    per_round = [ls / ss for ls, ss in zip(ls_times, times["stepscope_http"], strict=True)]
    print(
        "  Label Studio / Stepscope (medians): "
        + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        + "; per round (stepscope_http) "
        + ", ".join(f"{r:.2f}" for r in per_round)
    )
    print(f"  Label Studio / bare (nothing parsed or stored): {floor:.2f}x")
    bound = None
    if "database_floor" in times:
        # No Python at all on the server: the transfer and the rows' storing, in a row.
        bound = statistics.median(times["bare_http"]) + statistics.median(times["database_floor"])
        print(
            f"  Label Studio / (bare + database floor) {statistics.median(ls_times) / bound:.2f}x:"
            f" {bound:.2f} s with no server-side parsing, hashing or encoding; 3x needs"
            f" {statistics.median(ls_times) / 3:.2f} s"
        )
    # The server's CPU for the push, split: however well the web process and PostgreSQL
    # overlap, on this machine's cores it takes at least its sum over the core count.
    cores = psutil.cpu_count() or 1
    database_cpu = statistics.median(cpu_database["stepscope_http"])
    web_cpu = statistics.median(cpu["stepscope_http"]) - database_cpu
    overlapped = statistics.median(times["bare_http"]) + (web_cpu + database_cpu) / cores
    print(
        f"  stepscope_http CPU: web {web_cpu:.2f} s, PostgreSQL {database_cpu:.2f} s; on"
        f" {cores} cores, overlapped perfectly beside the transfer, at least {overlapped:.2f} s:"
        f" Label Studio / that {statistics.median(ls_times) / overlapped:.2f}x"
    )
    print(
        json.dumps(
            {
                "trajectories": args.trajectories,
                "steps": args.steps,
                "chunk": args.chunk,
                "seconds": times,
                "server_cpu_seconds": cpu,
                "database_cpu_seconds": cpu_database,
                "stepscope_http_overlapped_bound_seconds": overlapped,
                "ratio_label_studio_over": ratios,
                "ratio_label_studio_over_bare": floor,
                "bare_plus_database_floor_seconds": bound,
                "ratio_per_round_http": per_round,
            }
        )
    )
    shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
