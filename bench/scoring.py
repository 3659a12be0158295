"""PRM scoring throughput: the whole score path against a bare forward loop over the same
pre-tokenized batches, in the same run.

    .venv/bin/python bench/scoring.py                      # CPU, fp32, 4 layers x 256
    .venv/bin/python bench/scoring.py --device cuda --dtype bf16 --layers 24 --hidden 1024

Data: ProcessBench GSM8K (real math steps), repeated ``--copies`` times. Model: a
randomly initialised Qwen2-style token classifier (the Qwen2.5-Math-PRM shape) with a BPE
tokenizer trained on the data, saved to a temporary directory and loaded through the real
loading code.

The whole path is what a worker does per chunk (``services.scoring_chunk_score``): read
the steps from PostgreSQL, build and tokenize the inputs, forward length-sorted batches,
upsert the scores and record progress, chunk after chunk. It runs in this process rather
than through Celery so both figures share one process and one thread pool; the broker adds
one round trip per chunk on top. The model is loaded before timing (a worker loads it once).
The bare loop is only ``model(**batch)`` over the same batches, already tokenized, padded
and on the device. Prints one line per measurement and a final JSON line.
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
from django.conf import settings  # noqa: E402

from bench.cleanup import project_drop  # noqa: E402
from scoring import prm, services, tasks  # noqa: E402
from scoring.models import Scorer, ScoringChunk, ScoringRun  # noqa: E402
from scoring.prm import adapters, tiny  # noqa: E402
from trajectories.models import Project  # noqa: E402
from trajectories.services import project_create, trajectory_import  # noqa: E402

PROCESSBENCH = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "processbench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size")
    parser.add_argument("--copies", type=int, default=1, help="copies of ProcessBench GSM8K")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--chunk-steps", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best is reported")
    args = parser.parse_args()

    # The model goes inside the operator's model directories, where scorers may load from.
    models = Path(settings.STEPSCOPE_MODEL_DIRS[0])
    models.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=models, prefix="bench-scoring-") as tmp:
        data = write_data(Path(tmp) / "gsm8k.json", args.copies)
        project = project_create(slug=f"bench-scoring-{os.getpid()}", name="bench scoring")
        try:
            trajectory_import(project=project, source_format="processbench", path=data)
            texts = [t for record in json.loads(data.read_text()) for t in record["steps"]]
            tokenizer = tiny.build_tokenizer(corpus=texts, vocab_size=args.vocab)
            model_dir = tiny.save_token_classifier(
                Path(tmp) / "model", layers=args.layers, hidden=args.hidden, tokenizer=tokenizer
            )
            scorer = Scorer.objects.create(
                project=project,
                name="bench",
                kind=prm.TOKEN_CLASSIFICATION,
                model_ref=str(model_dir),
                parameters={
                    "device": args.device,
                    "dtype": args.dtype,
                    "batch_size": args.batch_size,
                    "chunk_steps": args.chunk_steps,
                    "max_length": args.max_length,
                },
            )
            report = measure(project, scorer, args.repeat)
        finally:
            project_drop(project)
    report.update(
        device=args.device,
        dtype=args.dtype,
        layers=args.layers,
        hidden=args.hidden,
        batch_size=args.batch_size,
        chunk_steps=args.chunk_steps,
    )
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
        report["peak_gpu_memory_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print(json.dumps(report))


def write_data(path: Path, copies: int) -> Path:
    """ProcessBench GSM8K, each copy's problems marked so their content hashes differ."""
    records = json.loads((PROCESSBENCH / "gsm8k.json").read_text())
    out = []
    for copy in range(copies):
        for record in records:
            prefix = f"({copy}) " if copy else ""
            out.append(
                dict(record, id=f"{record['id']}-{copy}", problem=prefix + record["problem"])
            )
    path.write_text(json.dumps(out))
    return path


def measure(project: Project, scorer: Scorer, repeat: int) -> dict[str, Any]:
    start = time.perf_counter()
    model = adapters.scorer_load(services.scorer_spec(scorer))
    load_s = time.perf_counter() - start
    size = model.parameter_count
    print(
        f"model: {size / 1e6:.2f}M parameters on {model.device} ({model.dtype}),"
        f" loaded in {load_s:.2f}s"
    )
    whole, bare, steps, tokens, padded = [], [], 0, 0, 0
    for number in range(1, repeat + 1):
        result = one_round(project, scorer, model)
        steps, tokens, padded = result["steps"], result["tokens"], result["padded"]
        whole.append(steps / result["whole_s"])
        bare.append(steps / result["bare_s"])
        print(
            f"round {number}: {steps} steps, {tokens} tokens in {result['batches']} batches:"
            f" whole path {result['whole_s']:.2f}s = {whole[-1]:.1f} steps/s,"
            f" bare loop {result['bare_s']:.2f}s = {bare[-1]:.1f} steps/s"
        )
    # Best of the rounds for both: on a shared machine the slow rounds measure the neighbours.
    whole_rate, bare_rate = max(whole), max(bare)
    ratio = whole_rate / bare_rate
    print(f"whole {whole_rate:.1f} steps/s, bare {bare_rate:.1f} steps/s, ratio {ratio:.2f}")
    return {
        "steps": steps,
        "tokens": tokens,
        "padding_fraction": round(1 - tokens / padded, 3) if padded else 0,
        "parameters": size,
        "load_seconds": round(load_s, 2),
        "whole_steps_per_s": round(whole_rate, 1),
        "bare_steps_per_s": round(bare_rate, 1),
        "whole_tokens_per_s": round(whole_rate * tokens / steps, 1) if steps else 0,
        "bare_tokens_per_s": round(bare_rate * tokens / steps, 1) if steps else 0,
        "ratio": round(ratio, 3),
    }


def one_round(project: Project, scorer: Scorer, model: adapters.StepScorer) -> dict[str, Any]:
    """One scoring run, chunk by chunk as a worker does it but without the broker (the
    chunk tasks' enqueueing is swapped for a list), each chunk's whole path timed next to
    a bare forward over that chunk's batches, alternating which goes first, so both see
    the same machine."""
    queued: list[int] = []
    original = tasks.score_chunk.apply_async
    tasks.score_chunk.apply_async = lambda args, **_: queued.append(args[0])
    try:
        run = ScoringRun.objects.create(project=project, scorer=scorer)
        start = time.perf_counter()
        services.scoring_run_plan(run_id=run.pk)
        whole_s = time.perf_counter() - start
    finally:
        tasks.score_chunk.apply_async = original
    bare_s, tokens, padded, count = 0.0, 0, 0, 0
    for number, chunk in enumerate(ScoringChunk.objects.filter(pk__in=queued).order_by("number")):
        batches = prepared_batches(model, chunk)
        tokens += sum(int(b["attention_mask"].sum()) for b in batches)
        padded += sum(b["attention_mask"].numel() for b in batches)
        count += len(batches)
        if number % 2:
            bare_s += bare_loop(model, batches)
        start = time.perf_counter()
        services.scoring_chunk_score(chunk_id=chunk.pk)
        whole_s += time.perf_counter() - start
        if not number % 2:
            bare_s += bare_loop(model, batches)
    run.refresh_from_db()
    assert run.status == ScoringRun.Status.DONE, run.error
    return {
        "steps": run.done,
        "tokens": tokens,
        "padded": padded,
        "batches": count,
        "whole_s": whole_s,
        "bare_s": bare_s,
    }


def prepared_batches(
    model: adapters.StepScorer, chunk: ScoringChunk
) -> list[dict[str, torch.Tensor]]:
    """The batches the chunk's task forms, tokenized, padded and on the device."""
    sequences = model.encode(services.trajectory_inputs(chunk))
    return [model.collate(batch) for batch in model.batches(sequences)]


def bare_loop(model: adapters.StepScorer, batches: list[dict[str, torch.Tensor]]) -> float:
    network = model.model  # type: ignore[attr-defined]
    synchronize(model.device)
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            network(**batch)
    synchronize(model.device)
    return time.perf_counter() - start


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
