"""Rollout throughput: the whole rollout path against a bare ``generate`` loop over the
same prompts, in the same run.

    .venv/bin/python bench/rollouts.py                       # CPU, the demo policy
    .venv/bin/python bench/rollouts.py --device cuda --dtype bf16 --tasks 50 --k 16

Data: the demo's arithmetic rollouts (``trajectories.synthetic``, seed 7), imported into a
throwaway project. Model: the demo policy that ``python manage.py train_demo_policy``
trains and keeps under the data directory (trained here first, for ``--train-minutes``,
if it is not there yet).

The whole path is what a worker does per chunk (``services.rollout_chunk_run``): read
the prefixes from PostgreSQL, render and tokenize the prompts, generate length-sorted
left-padded batches, cut the text into steps, check every answer, import the
continuations as trajectories, write the Monte Carlo values and record progress, chunk
after chunk. It runs in this process rather than through Celery so both figures share
one process and one thread pool. The bare loop is only ``model.generate`` over the same
batches, already tokenized, padded, seeded alike and on the device, with the same
sampling settings and CPU threads. Prints one line per measurement and a final JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepscope.settings")

import django

django.setup()

import torch  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from rollouts import demo_policy, services, tasks  # noqa: E402
from rollouts.generation.generator import Generator, generator_load  # noqa: E402
from rollouts.models import Policy, RolloutChunk, RolloutJob  # noqa: E402
from rollouts.services.chunks import chunk_branches, chunk_requests  # noqa: E402
from rollouts.services.demo import demo_policy_dir  # noqa: E402
from trajectories import synthetic  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--tasks", type=int, default=4, help="demo problems (4 rollouts each)")
    parser.add_argument("--k", type=int, default=4, help="continuations per step")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=64, help="continuations per chunk")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; the best is reported")
    parser.add_argument("--model", help="a causal LM directory instead of the demo policy")
    parser.add_argument("--train-minutes", type=float, default=5.0)
    parser.add_argument(
        "--cpu-threads",
        type=int,
        default=demo_policy.PARAMETERS["cpu_threads"],
        help="torch threads while generating on CPU (0: torch's own setting)",
    )
    args = parser.parse_args()

    model_dir = Path(args.model) if args.model else demo_policy_dir()
    if not args.model and not (model_dir / "stepscope-demo-policy.json").is_file():
        print(f"training the demo policy for {args.train_minutes} minutes into {model_dir}")
        demo_policy.train(model_dir, minutes=args.train_minutes)
    project = project_create(slug=f"bench-rollouts-{os.getpid()}", name="bench rollouts")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "demo.jsonl"
            synthetic.write_jsonl(data, synthetic.rollouts(tasks=args.tasks, seed=7))
            trajectory_import(project=project, source_format="stepscope", path=data)
        policy = Policy.objects.create(
            project=project,
            name="bench",
            model_ref=str(model_dir),
            parameters={
                **demo_policy.PARAMETERS,
                "device": args.device,
                "dtype": args.dtype,
                # The bare loop is transformers generate: compare like with like, also
                # on a GPU worker where vLLM is installed.
                "backend": "transformers",
                "batch_size": args.batch_size,
                "chunk_continuations": args.chunk,
                "cpu_threads": args.cpu_threads,
            },
        )
        report = measure(project, policy, args.k, args.repeat)
    finally:
        project_drop(project)
    report.update(
        device=args.device,
        dtype=args.dtype,
        tasks=args.tasks,
        k=args.k,
        batch_size=args.batch_size,
        chunk=args.chunk,
        model=str(model_dir),
        cpu_threads=args.cpu_threads,
        torch_threads=torch.get_num_threads(),
    )
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
        report["peak_gpu_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(report))


def measure(project: Project, policy: Policy, k: int, repeat: int) -> dict[str, Any]:
    start = time.perf_counter()
    generator = generator_load(services.policy_spec(policy))
    assert isinstance(generator, Generator), "the bare loop is for the transformers backend"
    load_s = time.perf_counter() - start
    print(
        f"model: {generator.parameter_count / 1e6:.2f}M parameters on {generator.device}"
        f" ({generator.dtype}), loaded in {load_s:.2f}s"
    )
    whole, bare, whole_tokens, bare_tokens = [], [], [], []
    result: dict[str, Any] = {}
    for number in range(1, repeat + 1):
        result = one_round(project, policy, generator, k)
        n = result["continuations"]
        whole.append(n / result["whole_s"])
        bare.append(n / result["bare_s"])
        whole_tokens.append(result["whole_tokens"] / result["whole_s"])
        bare_tokens.append(result["bare_tokens"] / result["bare_s"])
        print(
            f"round {number}: {n} continuations ({result['branches']} branches x k={k}),"
            f" {result['whole_tokens']} tokens: whole path {result['whole_s']:.2f}s ="
            f" {whole[-1]:.1f}/s, bare generate {result['bare_s']:.2f}s = {bare[-1]:.1f}/s"
            f" ({result['bare_tokens']} tokens)"
        )
    # Best of the rounds for both: on a shared machine the slow rounds measure the neighbours.
    ratio = max(whole) / max(bare)
    print(
        f"whole {max(whole):.1f} continuations/s ({max(whole_tokens):.0f} tokens/s),"
        f" bare {max(bare):.1f} continuations/s ({max(bare_tokens):.0f} tokens/s),"
        f" ratio {ratio:.2f}"
    )
    return {
        "continuations": result["continuations"],
        "solved": result["solved"],
        "parameters": generator.parameter_count,
        "load_seconds": round(load_s, 2),
        "whole_continuations_per_s": round(max(whole), 2),
        "bare_continuations_per_s": round(max(bare), 2),
        "whole_tokens_per_s": round(max(whole_tokens), 1),
        "bare_tokens_per_s": round(max(bare_tokens), 1),
        "ratio": round(ratio, 3),
    }


def one_round(project: Project, policy: Policy, generator: Generator, k: int) -> dict[str, Any]:
    """One job over every labelable step, chunk by chunk as a worker does it but without
    the broker (the chunk tasks' enqueueing is swapped for a list), each chunk's whole
    path timed next to a bare ``generate`` over that chunk's batches, alternating which
    goes first, so both see the same machine."""
    queued: list[int] = []
    original = tasks.run_chunk.apply_async
    tasks.run_chunk.apply_async = lambda args, **_: queued.append(args[0])
    try:
        job = RolloutJob.objects.create(
            project=project,
            policy=policy,
            mode=RolloutJob.Mode.ALL,
            k=k,
            selection={},
            answer_check="numeric",
        )
        start = time.perf_counter()
        services.rollout_job_plan(job_id=job.pk)
        whole_s = time.perf_counter() - start
    finally:
        tasks.run_chunk.apply_async = original
    bare_s, bare_tokens = 0.0, 0
    chunks = RolloutChunk.objects.filter(pk__in=queued).order_by("number")
    for number, chunk in enumerate(chunks):
        batches = generator.prepare(generator.encode(chunk_requests(job, chunk_branches(chunk))))
        if number % 2:
            seconds, tokens = bare_loop(generator, batches)
            bare_s, bare_tokens = bare_s + seconds, bare_tokens + tokens
        start = time.perf_counter()
        services.rollout_chunk_run(chunk_id=chunk.pk)
        whole_s += time.perf_counter() - start
        if not number % 2:
            seconds, tokens = bare_loop(generator, batches)
            bare_s, bare_tokens = bare_s + seconds, bare_tokens + tokens
    job.refresh_from_db()
    assert job.status == RolloutJob.Status.DONE, job.error
    return {
        "continuations": job.done,
        "branches": job.branches.count(),
        "solved": job.successes,
        "whole_tokens": job.tokens,
        "bare_tokens": bare_tokens,
        "whole_s": whole_s,
        "bare_s": bare_s,
    }


def bare_loop(generator: Generator, batches: list[Any]) -> tuple[float, int]:
    """``model.generate`` over prepared batches; returns seconds and new tokens (up to
    each row's end-of-sequence)."""
    network = generator.model
    kwargs = generator.generation_kwargs()
    eos = sorted(generator.eos_ids)
    synchronize(generator.device)
    start = time.perf_counter()
    outputs = []
    with torch.inference_mode(), generator.threads():
        for batch in batches:
            torch.manual_seed(batch.seed)
            outputs.append(network.generate(**batch.inputs, **kwargs)[:, batch.width :])
    synchronize(generator.device)
    seconds = time.perf_counter() - start
    tokens = 0
    for new in outputs:
        ended = torch.isin(new, torch.tensor(eos, device=new.device))
        first_end = torch.where(ended.any(dim=1), ended.int().argmax(dim=1), new.shape[1])
        tokens += int(first_end.sum())
    return seconds, tokens


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
