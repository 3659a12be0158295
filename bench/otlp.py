"""OTLP/HTTP receiver speed and reliability: N exporter processes (the OpenTelemetry SDK's
own ``OTLPSpanExporter`` behind a ``BatchSpanProcessor``) push agent traces of six
OpenInference-shaped spans at full speed to ``POST /v1/traces`` of a Stepscope under
gunicorn with a Celery worker, as deployed; optionally the same to Arize Phoenix.

    .venv/bin/python bench/otlp.py                              # 4 exporters, 2,000 traces
    .venv/bin/python bench/otlp.py --traces 4000 --exporters 4 --web-workers 4
    .venv/bin/python bench/otlp.py --faults --seconds 120       # kill the worker, restart PG
    .venv/bin/python bench/otlp.py --faults --seconds 600 --no-file-import   # ten minutes
    .venv/bin/python bench/otlp.py --phoenix /work/phoenix-venv/bin/phoenix

Everything runs on a private PostgreSQL and Redis under a temporary data folder (the
embedded mode), so restarting PostgreSQL touches no one else's server. Reported:

- spans/s: spans the exporters had acknowledged, over the time from the first export
  until the last of them is in its trajectory (then checked once more through the REST
  API: every trace is a trajectory with all its steps);
- p50/p95 span-to-visible latency: from the receiver's acknowledgement of a span to the
  commit of the assembly that put its trace's last span in (``LiveTrace.assembled_at``);
- the file importer's steps/s on the very same spans (read back from the staging table,
  written as an OTLP JSON file, imported with ``import_trajectories --format otel``);
- with ``--faults``: the Celery worker is killed (SIGKILL) once and PostgreSQL restarted
  once while the exporters push; afterwards every span any exporter saw acknowledged
  must be in exactly one trajectory, each trace in one trajectory.

Prints the command, the figures and a JSON line last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

START_TIMEOUT_S = 180


# The exporter processes (spawned: no Django, no database in them).


def exporter_main(
    url: str,
    token: str,
    project: str,
    index: int,
    traces: int,
    seconds: float,
    out: str,
    go: Any,
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
    from opentelemetry.trace import Status, StatusCode

    acked: list[tuple[str, str, float]] = []
    first_export: list[float] = []
    exports: list[tuple[int, float]] = []  # (spans, seconds) of each export call

    class Recording(OTLPSpanExporter):
        """The SDK's exporter, noting which spans the receiver acknowledged."""

        def export(self, spans: Any) -> Any:
            if not first_export:
                first_export.append(time.time())
            began = time.perf_counter()
            result = super().export(spans)
            exports.append((len(spans), time.perf_counter() - began))
            if result == SpanExportResult.SUCCESS:
                now = time.time()
                acked.extend(
                    (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}", now) for s in spans
                )
            return result

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    exporter = Recording(endpoint=f"{url}/v1/traces", headers=headers, timeout=30)
    resource = Resource.create(
        {"service.name": f"bench-agent-{index}", "stepscope.project": project}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(
            exporter,
            max_queue_size=200_000,
            max_export_batch_size=512,
            schedule_delay_millis=200,
        )
    )
    tracer = provider.get_tracer("bench")
    go.wait()
    end = time.monotonic() + seconds if seconds else None
    made = 0
    while (end is None and made < traces) or (end is not None and time.monotonic() < end):
        question = f"Agent {index} task {made}: what is {made} x 7?"
        with tracer.start_as_current_span(
            "agent", attributes={"openinference.span.kind": "AGENT", "input.value": question}
        ) as root:
            for step in range(2):
                with tracer.start_as_current_span(
                    "ChatCompletion",
                    attributes={
                        "openinference.span.kind": "LLM",
                        "llm.model_name": "bench-model",
                        "llm.input_messages.0.message.role": "user",
                        "llm.input_messages.0.message.content": question,
                        "llm.output_messages.0.message.role": "assistant",
                        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": (
                            "calculator"
                        ),
                        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": (
                            json.dumps({"expression": f"{made}*7"})
                        ),
                        "llm.token_count.prompt": 40 + step,
                        "llm.token_count.completion": 12,
                    },
                ):
                    pass
                with tracer.start_as_current_span(
                    "calculator",
                    attributes={
                        "openinference.span.kind": "TOOL",
                        "tool.name": "calculator",
                        "input.value": json.dumps({"expression": f"{made}*7"}),
                        "output.value": "error" if step == 0 else str(made * 7),
                    },
                ) as tool:
                    if step == 0:
                        tool.set_status(Status(StatusCode.ERROR, "ZeroDivisionError"))
            with tracer.start_as_current_span(
                "ChatCompletion",
                attributes={
                    "openinference.span.kind": "LLM",
                    "llm.model_name": "bench-model",
                    "llm.input_messages.0.message.role": "user",
                    "llm.input_messages.0.message.content": question,
                    "llm.output_messages.0.message.role": "assistant",
                    "llm.output_messages.0.message.content": f"The answer is {made * 7}.",
                },
            ):
                pass
            root.set_attribute("output.value", str(made * 7))
        made += 1
    provider.force_flush(timeout_millis=600_000)
    provider.shutdown()
    Path(out).write_text(
        json.dumps(
            {
                "acked": acked,
                "made": made,
                "first_export": first_export[:1],
                "cpu_s": time.process_time(),
                "exports": exports,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exporters", type=int, default=4)
    parser.add_argument("--traces", type=int, default=2000, help="traces in all (6 spans each)")
    parser.add_argument("--seconds", type=float, default=0, help="push for this long instead")
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--worker-concurrency", type=int, default=2)
    parser.add_argument("--faults", action="store_true")
    parser.add_argument("--phoenix", default="", help="the phoenix command, to compare with")
    parser.add_argument("--keep", action="store_true", help="keep the data folder")
    parser.add_argument(
        "--no-file-import",
        action="store_true",
        help="skip the file importer's run on the same spans (long after a long push)",
    )
    parser.add_argument("--out", default="/tmp/bench-otlp.json", help="the figures as JSON")
    parser.add_argument(
        "--trace-memory",
        action="store_true",
        help="only: the assembler's peak RSS for a 1,000-span and a 100,000-span trace",
    )
    parser.add_argument(
        "--root-last",
        action="store_true",
        help="with --trace-memory: the root span arrives after its children, as an SDK"
        " exports it (a span is exported when it ends)",
    )
    args = parser.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]), flush=True)

    data_dir = Path(tempfile.mkdtemp(prefix="stepscope-bench-otlp-"))
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        os.environ.pop(name, None)
    os.environ["STEPSCOPE_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "stepscope.settings"
    # A message a killed worker held comes back after this long (Redis visibility).
    os.environ["STEPSCOPE_BROKER_VISIBILITY_TIMEOUT"] = "30"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results: dict[str, Any] = {"exporters": args.exporters}
    try:
        if args.trace_memory:
            results = trace_memory(root_last=args.root_last)
            return
        stepscope = run_stepscope(args, data_dir)
        results.update(stepscope)
        if args.phoenix:
            results.update(run_phoenix(args, data_dir))
            if results.get("phoenix_spans_per_s"):
                ratio = results["spans_per_s"] / results["phoenix_spans_per_s"]
                results["ratio_stepscope_over_phoenix"] = round(ratio, 2)
                print(f"Stepscope / Phoenix spans/s: {ratio:.1f}x", flush=True)
    finally:
        from stepscope import embedded

        embedded.stop_all(data_dir)
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
        print(json.dumps(results), flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


def trace_memory(*, root_last: bool = False) -> dict[str, Any]:
    """Stage one trace of 1,000 and one of 100,000 spans, and assemble each in a fresh
    process: its peak RSS (what a worker needs for the largest trace allowed). With
    ``root_last`` the children are staged and assembled first, then the root alone."""
    from django.contrib.auth.models import User

    from tests.trajectories import otlp_bodies
    from trajectories.formats import otlp
    from trajectories.services import project_create
    from trajectories.services.live import live_spans_accept

    user = User.objects.create_user("bench-memory", password="unused-bench-password")
    figures: dict[str, Any] = {}
    for size in (1000, 100_000):
        project = project_create(slug=f"memory-{size}", name=f"memory {size}", owner=user)
        template = otlp_bodies.agent_spans(0)
        order = [*range(1, size), 0] if root_last else list(range(size))
        for start in range(0, size, 1000):
            spans = []
            for n in order[start : start + 1000]:
                span = dict(template[n % 6] if n else template[0])
                span["n"] = n
                span["span_id"] = f"{n + 1:016x}"
                span["parent"] = "" if n == 0 else f"{1:016x}"
                spans.append(span)
            decoded = otlp.decode_protobuf(otlp_bodies.protobuf_body(spans), max_attribute=100_000)
            live_spans_accept(project_id=project.pk, spans=decoded.spans)
        code = (
            "import django, resource, time; django.setup();"
            "from trajectories.services.assembly import live_traces_assemble;"
            "start = time.perf_counter(); live_traces_assemble();"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
            " time.perf_counter() - start)"
        )
        before = (
            "import django, resource; django.setup();"
            "import trajectories.services.assembly, trajectories.formats.otel;"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
        )
        base = int(
            subprocess.run(
                [sys.executable, "-c", before], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout.split()[-1]
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True
        )
        rss, seconds = done.stdout.split()[-2:]
        figures[f"rss_mb_{size}"] = round(int(rss) / 1024, 1)
        figures[f"rss_mb_above_start_{size}"] = round((int(rss) - base) / 1024, 1)
        figures[f"assemble_s_{size}"] = round(float(seconds), 2)
        print(
            f"a trace of {size} spans: assembled in {float(seconds):.1f} s, peak RSS"
            f" {int(rss) / 1024:.0f} MB ({(int(rss) - base) / 1024:.0f} MB above a started"
            " worker process)",
            flush=True,
        )
    figures["rss_ratio"] = round(figures["rss_mb_100000"] / figures["rss_mb_1000"], 2)
    return figures


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited") from None
            time.sleep(0.3)
    raise RuntimeError(f"{what} did not start in {START_TIMEOUT_S} s")


def start_worker(args: argparse.Namespace, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "celery", "-A", "stepscope", "worker", "--beat"),
            *("-Q", "default", "--concurrency", str(args.worker_concurrency)),
            *("--without-gossip", "--without-mingle", "--loglevel", "WARNING"),
            *("--schedule", str(log.with_suffix(".beat"))),
        ],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def push(
    args: argparse.Namespace, url: str, token: str, project: str, out_dir: Path
) -> tuple[list[dict[str, Any]], float]:
    """Run the exporters; their reports and the wall time of the push."""
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    per = -(-args.traces // args.exporters)
    outs = [out_dir / f"exporter-{n}.json" for n in range(args.exporters)]
    processes = [
        context.Process(
            target=exporter_main,
            args=(url, token, project, n, per, args.seconds, str(outs[n]), go),
        )
        for n in range(args.exporters)
    ]
    for process in processes:
        process.start()
    time.sleep(3)  # let the spawned interpreters import the SDK before the clock starts
    start = time.time()
    go.set()
    for process in processes:
        process.join()
    return [json.loads(out.read_text()) for out in outs], time.time() - start


def run_stepscope(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import OperationalError, connection

    from accounts.services import api_token_create
    from trajectories.models import LiveTrace, Step
    from trajectories.services import project_create

    user = User.objects.create_user("bench-otlp", password="unused-bench-password")
    _, token = api_token_create(user=user, name="bench")
    project = project_create(slug="bench-otlp", name="bench otlp", owner=user)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    web_log = data_dir / "gunicorn.log"
    web = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", "stepscope.wsgi"),
            *("--bind", f"127.0.0.1:{port}", "--workers", str(args.web_workers)),
            *("--log-level", "warning", "--timeout", "120"),
        ],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=web_log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    worker_log = data_dir / "worker.log"
    workers = [start_worker(args, worker_log)]
    wait_http(f"{url}/healthz", web, "gunicorn")
    warm(url, token, args.web_workers)
    faults: list[str] = []
    stop_faults = threading.Event()
    if args.faults:
        threading.Thread(
            target=inject_faults,
            args=(args, data_dir, worker_log, faults, stop_faults, workers),
            daemon=True,
        ).start()
    web_cpu, worker_cpu = tree_cpu(web.pid), tree_cpu(workers[0].pid)
    pg_cpu = postgres_cpu(data_dir)
    try:
        reports, push_seconds = push(args, url, token, project.slug, data_dir)
        acked = {(t, s): at for report in reports for t, s, at in report["acked"]}
        made = sum(report["made"] for report in reports) * 6
        first = min(r["first_export"][0] for r in reports if r["first_export"])
        traces = {t for t, _ in acked}
        print(
            f"pushed {made} spans ({len(traces)} traces) in {push_seconds:.1f} s;"
            f" acknowledged {len(acked)}",
            flush=True,
        )
        # Until every acknowledged span is in its trace's trajectory.
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*), coalesce(sum(assembled_count), 0),"
                        " coalesce(sum(span_count - assembled_count), 0)"
                        " FROM trajectories_livetrace WHERE project_id = %s",
                        [project.pk],
                    )
                    live, assembled, pending = cursor.fetchone()
            except OperationalError:  # this process's connection, cut by the restart
                connection.close()
                time.sleep(0.5)
                continue
            if assembled >= len(acked) and pending == 0 and live >= len(traces):
                break
            time.sleep(0.1)
        visible_at = time.time()
        stop_faults.set()
        elapsed = visible_at - first
        cpu = {
            "web": tree_cpu(web.pid) - web_cpu,
            "worker": tree_cpu(workers[0].pid) - worker_cpu,
            "postgres": postgres_cpu(data_dir) - pg_cpu,
            "exporters": sum(report["cpu_s"] for report in reports),
        }
        api_steps = api_step_total(url, token, project.slug)
        rows = LiveTrace.objects.filter(project=project).values_list("trace_id", "assembled_at")
        visible = {trace_id: at.timestamp() for trace_id, at in rows if at is not None}
        latencies = sorted(
            max(0.0, visible[t] - at) for (t, _), at in acked.items() if t in visible
        )
        stored = Step.objects.filter(trajectory__project=project).count()
        result: dict[str, Any] = {
            "spans_acknowledged": len(acked),
            "spans_made": made,
            "traces": len(traces),
            "steps_stored": stored,
            "steps_through_api": api_steps,
            "seconds_to_visible": round(elapsed, 2),
            "spans_per_s": round(len(acked) / elapsed, 1),
            "latency_p50_s": round(statistics.median(latencies), 2) if latencies else None,
            "latency_p95_s": round(latencies[int(len(latencies) * 0.95) - 1], 2)
            if latencies
            else None,
            "faults": faults,
            "cpu_seconds": {name: round(value, 1) for name, value in cpu.items()},
        }
        print(
            f"Stepscope: {result['spans_per_s']} spans/s ({len(acked)} spans visible"
            f" {elapsed:.1f} s after the first export); latency p50"
            f" {result['latency_p50_s']} s, p95 {result['latency_p95_s']} s;"
            f" through the API: {api_steps} steps; CPU seconds {result['cpu_seconds']}",
            flush=True,
        )
        calls = sorted(seconds for report in reports for _, seconds in report["exports"])
        sizes = sorted(size for report in reports for size, _ in report["exports"])
        if calls:
            result["exports"] = len(calls)
            result["export_spans_median"] = sizes[len(sizes) // 2]
            result["export_seconds_p50"] = round(calls[len(calls) // 2], 3)
            result["export_seconds_p95"] = round(calls[int(len(calls) * 0.95) - 1], 3)
            print(
                f"exports: {len(calls)} requests, median {result['export_spans_median']} spans,"
                f" answered in p50 {result['export_seconds_p50']} s,"
                f" p95 {result['export_seconds_p95']} s",
                flush=True,
            )
        result.update(check_each_span_once(project.pk, acked))
        if not args.no_file_import:
            result.update(file_import_speed(project.pk, data_dir))
        return result
    finally:
        stop_faults.set()
        web.terminate()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(workers[0].pid, signal.SIGTERM)
        web.wait(timeout=30)


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children so far."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def postgres_cpu(data_dir: Path) -> float:
    """CPU seconds of the private PostgreSQL: the postmaster, its backends and the
    backends it has reaped."""
    pid_file = data_dir / "postgres" / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return tree_cpu(pid)


def warm(url: str, token: str, web_workers: int) -> None:
    """Each gunicorn worker imports the receiver's modules on its first request: send a
    few small traces to a project of their own before the clock starts."""
    from django.contrib.auth.models import User

    from tests.trajectories import otlp_bodies
    from trajectories.services import project_create

    project_create(
        slug="bench-warm", name="bench warm", owner=User.objects.get(username="bench-otlp")
    )
    for n in range(web_workers * 4):
        body = otlp_bodies.protobuf_body(otlp_bodies.agent_spans(n), project="bench-warm")
        request = urllib.request.Request(
            f"{url}/v1/traces",
            data=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()


def api_step_total(url: str, token: str, slug: str) -> int:
    """The project's steps as the REST API lists its trajectories (every page)."""
    total = 0
    next_url: str | None = f"{url}/api/v1/trajectories/?project={slug}"
    while next_url:
        request = urllib.request.Request(next_url, headers={"Authorization": f"Token {token}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            page = json.loads(response.read())
        total += sum(item["step_count"] for item in page["results"])
        next_url = page.get("next")
    return total


def check_each_span_once(project_id: int, acked: dict[tuple[str, str], float]) -> dict[str, Any]:
    """Every acknowledged span in exactly one step of one trajectory, its trace's."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.external_id, s.metadata->>'span_id', count(*) FROM trajectories_step s"
            " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            " WHERE t.project_id = %s GROUP BY 1, 2",
            [project_id],
        )
        steps = {(t, s): n for t, s, n in cursor.fetchall()}
        cursor.execute(
            "SELECT count(*) - count(DISTINCT external_id) FROM trajectories_trajectory"
            " WHERE project_id = %s",
            [project_id],
        )
        (duplicate_trajectories,) = cursor.fetchone()
    missing = [key for key in acked if key not in steps]
    twice = [key for key, n in steps.items() if n > 1]
    print(
        f"check: {len(acked)} acknowledged spans; missing {len(missing)}, in two steps"
        f" {len(twice)}, traces in two trajectories {duplicate_trajectories}",
        flush=True,
    )
    return {
        "missing_spans": len(missing),
        "spans_twice": len(twice),
        "traces_twice": duplicate_trajectories,
    }


def file_import_speed(project_id: int, data_dir: Path) -> dict[str, Any]:
    """The otel file importer on the same spans: one OTLP JSON request per trace."""
    from django.core.management import call_command
    from django.db import connection

    path = data_dir / "spans.jsonl"
    with connection.cursor() as cursor, path.open("w") as out:
        cursor.execute(
            "SELECT trace_id, json_agg(record ORDER BY id)::text FROM trajectories_stagedspan"
            " WHERE project_id = %s GROUP BY trace_id",
            [project_id],
        )
        for _, spans in cursor.fetchall():
            out.write('{"resourceSpans":[{"scopeSpans":[{"spans":' + spans + "}]}]}\n")
    from trajectories.models import Step

    start = time.perf_counter()
    call_command(
        "import_trajectories",
        "--project",
        "bench-otlp-file",
        "--create",
        "--format",
        "otel",
        str(path),
        stdout=open(os.devnull, "w"),  # noqa: SIM115
    )
    elapsed = time.perf_counter() - start
    steps = Step.objects.filter(trajectory__project__slug="bench-otlp-file").count()
    rate = steps / elapsed
    print(f"file importer: {steps} steps in {elapsed:.2f} s, {rate:.0f} steps/s", flush=True)
    return {"file_import_steps": steps, "file_import_steps_per_s": round(rate, 1)}


def inject_faults(
    args: argparse.Namespace,
    data_dir: Path,
    worker_log: Path,
    faults: list[str],
    stop: threading.Event,
    workers: list[subprocess.Popen[bytes]],
) -> None:
    """Kill the worker (SIGKILL, the whole process group) and start a new one; later
    restart PostgreSQL (pg_ctl restart -m fast), while the exporters push."""
    span = args.seconds or 30.0
    if stop.wait(span / 3):
        return
    os.killpg(workers[0].pid, signal.SIGKILL)
    workers[0].wait()
    workers[0] = start_worker(args, worker_log)
    faults.append(f"worker killed at +{span / 3:.0f} s and restarted")
    print(faults[-1], flush=True)
    if stop.wait(span / 3):
        return
    pgdata = (data_dir / "postgres").resolve()
    opts = (pgdata / "postmaster.opts").read_text().split()
    pg_ctl = str(Path(opts[0].strip("'\"")).with_name("pg_ctl"))
    started = time.time()
    # The embedded server runs as the user pgserver makes when started by root.
    as_owner = ["runuser", "-u", "pgserver", "--"] if os.geteuid() == 0 else []
    restart = ["restart", "-D", str(pgdata), "-m", "fast", "-w", "-l", str(pgdata / "restart.log")]
    subprocess.run(
        [*as_owner, pg_ctl, *restart],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    faults.append(
        f"PostgreSQL restarted at +{2 * span / 3:.0f} s ({time.time() - started:.1f} s down)"
    )
    print(faults[-1], flush=True)


def run_phoenix(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """The same exporters against ``phoenix serve`` (its own OTLP receiver and SQLite
    in a fresh working folder), until its GraphQL API counts every span."""
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(data_dir / "phoenix"),
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
    }
    log = data_dir / "phoenix.log"
    phoenix = subprocess.Popen(
        [args.phoenix, "serve"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, phoenix, "phoenix")
        reports, push_seconds = push(args, url, "", "default", data_dir)
        acked = sum(len(report["acked"]) for report in reports)
        first = min(r["first_export"][0] for r in reports if r["first_export"])
        deadline = time.monotonic() + 1800
        counted = 0
        while time.monotonic() < deadline:
            counted = phoenix_span_count(url)
            if counted >= acked:
                break
            time.sleep(0.5)
        elapsed = time.time() - first
        rate = acked / elapsed
        print(
            f"Phoenix: {rate:.1f} spans/s ({counted} of {acked} spans counted by its API"
            f" {elapsed:.1f} s after the first export; push took {push_seconds:.1f} s)",
            flush=True,
        )
        return {
            "phoenix_spans_acknowledged": acked,
            "phoenix_seconds_to_visible": round(elapsed, 2),
            "phoenix_spans_per_s": round(rate, 1),
        }
    finally:
        phoenix.terminate()
        phoenix.wait(timeout=30)


def phoenix_span_count(url: str) -> int:
    query = json.dumps({"query": "{ projects { edges { node { name recordCount } } } }"})
    request = urllib.request.Request(
        f"{url}/graphql", data=query.encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            data = json.loads(response.read())
    except OSError:
        return 0
    edges = data.get("data", {}).get("projects", {}).get("edges", [])
    return sum(int(edge["node"]["recordCount"]) for edge in edges)


if __name__ == "__main__":
    main()
