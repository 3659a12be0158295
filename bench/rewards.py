"""Reward service speed: steps scored per second through ``POST /api/v1/rewards/`` (gunicorn,
Redis, a ``manage.py reward_worker`` process) with one client and with eight concurrent
clients, against the bare loop of the same model in this process, in the same run; and the
p50/p95 latency of one 16-trajectory request.

    .venv/bin/python bench/rewards.py                          # CPU, fp32, 4 layers x 256
    .venv/bin/python bench/rewards.py --device cuda --dtype bf16 --layers 24 --hidden 1024

Data: ProcessBench GSM8K (real math steps), 16 trajectories a request. Model: a randomly
initialised Qwen2-style token classifier (the Qwen2.5-Math-PRM shape) with a BPE tokenizer
trained on the data, saved to the models folder and loaded through the real loading code,
by the worker and by this process alike (both load it before the clock starts).

The bare loop is the loaded scorer's ``score()`` on the same requests' trajectories, one
request after another, in this process: tokenizing, length-sorted batches, forward passes
and reading the scores, without HTTP, JSON, Redis or batching across requests. Each figure
is the median of ``--repeat`` rounds, with the spread (min-max) beside it. Everything runs
on a private PostgreSQL and Redis under a temporary data folder (the embedded mode).
Prints the command, the figures and a JSON line last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

PROCESSBENCH = ROOT.parent / "shared" / "realdata" / "processbench" / "gsm8k.json"
START_TIMEOUT_S = 180
PER_REQUEST = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16, help="the scorer's batch size")
    parser.add_argument("--requests", type=int, default=24, help="requests per round")
    parser.add_argument("--clients", type=int, default=8, help="the concurrent clients")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--out", default="/tmp/bench-rewards.json")
    args = parser.parse_args()
    print("command:", " ".join([sys.executable, *sys.argv]), flush=True)

    data_dir = Path(tempfile.mkdtemp(prefix="stepscope-bench-rewards-"))
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        os.environ.pop(name, None)
    os.environ["STEPSCOPE_DATA_DIR"] = str(data_dir)
    os.environ["DJANGO_SETTINGS_MODULE"] = "stepscope.settings"
    os.environ["STEPSCOPE_REWARDS_MAX_QUEUE"] = "1000"
    import django

    django.setup()
    from django.core.management import call_command

    from stepscope import embedded

    call_command("migrate", verbosity=0)
    processes: list[subprocess.Popen[bytes]] = []
    results: dict[str, Any] = {"per_request": PER_REQUEST, "clients": args.clients}
    try:
        results.update(run(args, data_dir, processes))
    except Exception:
        for log in ("gunicorn.log", "reward-worker.log"):
            path = data_dir / log
            if path.exists():
                print(f"--- the end of {log}:", *path.read_text().splitlines()[-30:], sep="\n")
        raise
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=60)
        embedded.stop_all(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        print(json.dumps(results), flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))


def run(
    args: argparse.Namespace, data_dir: Path, processes: list[subprocess.Popen[bytes]]
) -> dict[str, Any]:
    import httpx
    from django.conf import settings
    from django.contrib.auth.models import User

    from accounts.services import api_token_create
    from scoring import prm
    from scoring.models import Scorer
    from scoring.prm import adapters, tiny
    from scoring.rewards.inputs import scorer_inputs, trajectories_parse
    from scoring.services import scorer_spec
    from trajectories.services import project_create

    records = [
        {
            "id": str(record["id"]),
            "task": record["problem"],
            "steps": [{"content": step} for step in record["steps"]],
        }
        for record in json.loads(PROCESSBENCH.read_text())
    ]
    requests = [
        [records[(n * PER_REQUEST + i) % len(records)] for i in range(PER_REQUEST)]
        for n in range(args.requests)
    ]
    steps_per_round = sum(len(r["steps"]) for batch in requests for r in batch)

    user = User.objects.create_user("bench-rewards", password="unused-bench-password")
    _, token = api_token_create(user=user, name="bench")
    project = project_create(slug="bench-rewards", name="bench rewards", owner=user)
    models = Path(settings.STEPSCOPE_MODEL_DIRS[0])
    models.mkdir(parents=True, exist_ok=True)
    texts = [step["content"] for record in records for step in record["steps"]]
    model_dir = tiny.save_token_classifier(
        models / "bench-prm",
        layers=args.layers,
        hidden=args.hidden,
        tokenizer=tiny.build_tokenizer(corpus=texts, vocab_size=4096),
    )
    scorer = Scorer.objects.create(
        project=project,
        name="prm",
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref=str(model_dir),
        parameters={"device": args.device, "dtype": args.dtype, "batch_size": args.batch_size},
    )

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    processes.append(
        subprocess.Popen(
            [
                *(sys.executable, "-m", "gunicorn", "stepscope.wsgi"),
                *("--bind", f"127.0.0.1:{port}", "--workers", str(args.web_workers)),
                # A waiting request holds a thread: enough for every client.
                *("--threads", str(args.clients), "--log-level", "warning", "--timeout", "300"),
            ],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=(data_dir / "gunicorn.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
    )
    processes.append(
        subprocess.Popen(
            [sys.executable, "manage.py", "reward_worker"],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=(data_dir / "reward-worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
    )
    wait_http(f"{url}/healthz", processes[0])
    http = httpx.Client(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=600)

    def ask(batch: list[dict[str, Any]]) -> float:
        started = time.perf_counter()
        answer = http.post(
            "/api/v1/rewards/",
            json={"project": project.slug, "scorer": "prm", "trajectories": batch, "timeout": 600},
        )
        if answer.status_code != 200:
            raise RuntimeError(f"the service answered {answer.status_code}: {answer.text}")
        return time.perf_counter() - started

    # Warm: the worker loads the model, each web process imports the scoring modules.
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            for _ in range(args.web_workers * 2):
                ask(requests[0])
            break
        except RuntimeError as error:
            if "no reward worker" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)

    model = adapters.scorer_build(scorer_spec(scorer))
    inputs = [scorer_inputs(trajectories_parse(batch)) for batch in requests]
    model.score(inputs[0])
    print(
        f"model: {model.parameter_count / 1e6:.2f}M parameters on {model.device}"
        f" ({model.dtype}); {args.requests} requests of {PER_REQUEST} trajectories,"
        f" {steps_per_round} steps a round",
        flush=True,
    )

    rounds: dict[str, list[float]] = {"bare": [], "one": [], "many": []}
    latencies: dict[str, list[float]] = {"one": [], "many": []}
    for number in range(1, args.repeat + 1):
        started = time.perf_counter()
        for trajectories in inputs:
            model.score(trajectories)
        rounds["bare"].append(steps_per_round / (time.perf_counter() - started))

        started = time.perf_counter()
        latencies["one"].extend(ask(batch) for batch in requests)
        rounds["one"].append(steps_per_round / (time.perf_counter() - started))

        started = time.perf_counter()
        latencies["many"].extend(concurrently(ask, requests, args.clients))
        rounds["many"].append(steps_per_round / (time.perf_counter() - started))
        print(
            f"round {number}: bare {rounds['bare'][-1]:.0f} steps/s, service 1 client"
            f" {rounds['one'][-1]:.0f}, {args.clients} clients {rounds['many'][-1]:.0f}",
            flush=True,
        )

    bare = statistics.median(rounds["bare"])
    out: dict[str, Any] = {"device": str(model.device), "steps_per_round": steps_per_round}
    for name, label in (("bare", "bare loop"), ("one", "1 client"), ("many", "8 clients")):
        values = rounds[name]
        median = statistics.median(values)
        out[f"{name}_steps_per_s"] = round(median, 1)
        out[f"{name}_spread"] = [round(min(values), 1), round(max(values), 1)]
        ratio = f", {median / bare:.2f}x bare" if name != "bare" else ""
        print(
            f"{label}: {median:.0f} steps/s (spread {min(values):.0f}-{max(values):.0f}){ratio}",
            flush=True,
        )
        if name != "bare":
            out[f"{name}_ratio"] = round(median / bare, 3)
            p50, p95 = percentile(latencies[name], 50), percentile(latencies[name], 95)
            out[f"{name}_p50_ms"], out[f"{name}_p95_ms"] = round(p50 * 1000), round(p95 * 1000)
            print(
                f"  latency of a {PER_REQUEST}-trajectory request: p50 {p50 * 1000:.0f} ms,"
                f" p95 {p95 * 1000:.0f} ms",
                flush=True,
            )
    return out


def concurrently(ask: Any, requests: list[Any], clients: int) -> list[float]:
    """``clients`` threads take the requests in turn, each waiting for its answer."""
    pending = list(reversed(requests))
    lock = threading.Lock()
    took: list[float] = []
    failed: list[BaseException] = []

    def client() -> None:
        while True:
            with lock:
                if not pending or failed:
                    return
                batch = pending.pop()
            try:
                seconds = ask(batch)
            except Exception as error:
                with lock:
                    failed.append(error)
                return
            with lock:
                took.append(seconds)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    return took


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("gunicorn exited") from None
            time.sleep(0.3)
    raise RuntimeError(f"gunicorn did not start in {START_TIMEOUT_S} s")


if __name__ == "__main__":
    main()
