"""How long after `make run` each demo view has its data, as a newcomer's first run sees
it: a fresh data directory (its own embedded PostgreSQL and Redis, no demo policy weights
kept from an earlier run), then what `make run` does in order (`stepscope.processes up`,
`migrate`, `demo_setup`, `stepscope.processes worker`, `runserver`), the web server on a
free port instead of 8000 so that it meets no other server on the machine.

    .venv/bin/python bench/make_run.py                    # wait up to 20 minutes
    .venv/bin/python bench/make_run.py --timeout 1500 --keep /tmp/run-data

Prints the command, then each moment counted from the start: the first page answering
(the fast-feedback bound is 90 s), and per demo project, the first time the database holds
what each view needs: the queue's item leased to the demo user, the trained head and the
tiny PRM scored (the compare and failures pages), both attribution runs finished (credit
strips), the three exports finished, and on the demo project the demo policy trained and
the Monte Carlo values of the demo rollouts. Each moment also says the CPU seconds the
run has used so far (the steps that returned, and the live processes started with its
data directory: worker, web server, PostgreSQL, Redis) and the machine's load average,
since on a shared machine the wall clock says as much about the neighbours as about the
run.

One run (it takes many minutes); repeat it to see the spread. Stops
the worker, the servers and the embedded databases at the end; the data directory is
removed unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(data: Path) -> float:
    """CPU seconds of the steps that returned (this process's waited-for children) and of
    the live processes whose environment names ``data`` as the data directory."""
    import resource

    tick = os.sysconf("SC_CLK_TCK")
    mark = f"STEPSCOPE_DATA_DIR={data}".encode()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = used.ru_utime + used.ru_stime
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def status() -> dict[str, bool]:
    """What each view needs, per showcase project (Django set up in this process)."""
    from demo import showcase
    from demo.management.commands.demo_setup import DEMO_USER, SHOWCASE_LABELS
    from exports.models import ExportJob
    from labeling.models import QueueAssignment
    from rollouts.models import DemoPolicyTraining, StepMC
    from scoring.models import AttributionRun, ScoringRun

    found: dict[str, bool] = {}
    for slug in SHOWCASE_LABELS:
        done = ScoringRun.objects.filter(project__slug=slug, status="done")
        found[f"{slug}: queue leased"] = QueueAssignment.objects.filter(
            item__queue__project__slug=slug,
            item__queue__name=showcase.QUEUE,
            annotator__username=DEMO_USER,
        ).exists()
        found[f"{slug}: head scored (compare, failures)"] = done.filter(
            kind="score", scorer__name=showcase.HEAD
        ).exists()
        found[f"{slug}: tiny PRM scored"] = done.filter(
            kind="score", scorer__name=showcase.PRM
        ).exists()
        found[f"{slug}: attribution runs"] = (
            AttributionRun.objects.filter(project__slug=slug, status="done").count() >= 2
        )
        found[f"{slug}: exports"] = ExportJob.objects.filter(
            project__slug=slug, status="done"
        ).count() >= len(showcase.EXPORTS)
    found["demo: policy trained"] = DemoPolicyTraining.objects.filter(
        project__slug="demo", status="done"
    ).exists()
    found["demo: MC values"] = StepMC.objects.filter(
        step__trajectory__project__slug="demo"
    ).exists()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait")
    parser.add_argument("--poll", type=float, default=5.0, help="seconds between looks")
    parser.add_argument("--keep", type=Path, help="keep the data directory here")
    args = parser.parse_args()
    print("$", " ".join([Path(PY).name, *sys.argv]), flush=True)

    data = args.keep or Path(tempfile.mkdtemp(prefix="stepscope-make-run-"))
    env = {**os.environ, "STEPSCOPE_DATA_DIR": str(data), "STEPSCOPE_DEBUG": "0"}
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "STEPSCOPE_DATABASE_NAME"):
        env.pop(name, None)
    port = free_port()
    server: subprocess.Popen[bytes] | None = None
    start = time.monotonic()

    def at() -> str:
        load = os.getloadavg()[0]
        return (
            f"{time.monotonic() - start:7.1f} s  (cpu {cpu_seconds(data):7.1f} s, load {load:.1f})"
        )

    try:
        for step in (
            [PY, "-m", "stepscope.processes", "up"],
            [PY, "manage.py", "migrate", "--no-input"],
            [PY, "manage.py", "demo_setup"],
            [PY, "-m", "stepscope.processes", "worker"],
        ):
            subprocess.run(step, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            print(f"{at()}  {' '.join(step[1:])} returned", flush=True)
        server = subprocess.Popen(
            [PY, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - start > args.timeout:
                raise SystemExit("the web server never answered")
            time.sleep(0.5)
        print(f"{at()}  first page (/login/) answers", flush=True)

        os.environ.update({k: v for k, v in env.items() if k.startswith("STEPSCOPE_")})
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.db import connection

        seen: set[str] = set()
        while time.monotonic() - start < args.timeout:
            for name, ready in status().items():
                if ready and name not in seen:
                    seen.add(name)
                    print(f"{at()}  {name}", flush=True)
            connection.close()
            if len(seen) == len(status()):
                print(f"{at()}  every view has its data", flush=True)
                break
            time.sleep(args.poll)
        else:
            missing = sorted(set(status()) - seen)
            print(f"{at()}  timed out; still missing: {', '.join(missing)}", flush=True)
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # A request thread can hold the development server past a SIGINT; the
                # worker and the databases are stopped below either way.
                server.kill()
                server.wait(timeout=30)
        subprocess.run([PY, "-m", "stepscope.processes", "down"], cwd=ROOT, env=env, check=False)
        if args.keep is None:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
