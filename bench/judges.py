"""LLM judge throughput: judged steps per second on the judge path against a bare
``generate`` loop over the same prompts, in the same run.

    .venv/bin/python bench/judges.py                         # CPU, fp32, the tiny judge
    .venv/bin/python bench/judges.py --device cuda --dtype bf16 --layers 12 --hidden 768

Data: the first ``--problems`` problems of ProcessBench GSM8K (real math steps), judged
per step (one prompt per step, the task and the earlier steps before it) or, with
``--mode trajectory``, once per problem. Model: a randomly initialised Llama-style causal
LM with a ChatML chat template (``scoring.prm.tiny.save_judge_lm``), saved to a temporary
directory and loaded through the real loading code.

The judge path is what a worker's chunk does besides its row writes: build the requests
from the trajectories, count every prompt against the context once before asking (the
run's check, ``judge.check``, which a worker does once per run over all its chunks),
render each through the chat template and tokenize it, check it against the context,
generate length-sorted left-padded batches with log-probabilities,
decode, parse every verdict and turn it into step values. (The worker then stores one
reply row per request; a database is not involved here.) The bare loop is only
``model.generate`` over the same batches, already tokenized, padded and on the device,
with the same decoding settings. Both are timed in wall seconds and in this process's
CPU seconds (less moved by other processes on a shared machine). Each round times both
over the same groups of prompts, alternating per group which goes first; prints every
round, the median and range of each, and a final JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from scoring.judges.backend import JudgeSpec, Reply
from scoring.judges.config import (
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATES,
    judge_params,
)
from scoring.judges.local import LocalJudge
from scoring.judges.modes import JudgeRequest, Prompt, requests_build, step_values
from scoring.judges.replies import verdict_read
from scoring.prm import tiny
from scoring.prm.base import StepInput, TrajectoryInput

PROCESSBENCH = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "processbench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--mode", default="per-step", choices=["per-step", "trajectory"])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5, help="rounds")
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))

    records = json.loads((PROCESSBENCH / "gsm8k.json").read_text())[: args.problems]
    trajectories = [
        TrajectoryInput(
            number,
            record["problem"],
            tuple(StepInput(number * 1000 + i, text) for i, text in enumerate(record["steps"])),
        )
        for number, record in enumerate(records)
    ]
    raw = {
        "mode": args.mode,
        "device": args.device,
        "dtype": args.dtype,
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
    }
    params = judge_params(raw)
    with tempfile.TemporaryDirectory() as tmp:
        path = tiny.save_judge_lm(Path(tmp) / "judge", layers=args.layers, hidden=args.hidden)
        start = time.perf_counter()
        judge = LocalJudge(JudgeSpec(str(path), params))
        load_s = time.perf_counter() - start
    prompt = Prompt(DEFAULT_SYSTEM, DEFAULT_TEMPLATES[args.mode])
    requests = requests_build(params, prompt, trajectories)
    steps = sum(len(t.steps) for t in trajectories)
    print(
        f"model: {judge.parameter_count / 1e6:.2f}M parameters on {judge.device}"
        f" ({judge.dtype}), loaded in {load_s:.2f}s; {len(requests)} prompts for {steps} steps"
    )
    whole, bare = [], []
    whole_cpu, bare_cpu = [], []
    parsed = 0
    # Paired in small groups (a chunk's worth of prompts each), alternating which goes
    # first, so both figures see the same load on a shared machine.
    group = args.batch_size * 2
    groups = [requests[i : i + group] for i in range(0, len(requests), group)]
    for number in range(1, args.repeat + 1):
        whole_s = bare_s = whole_c = bare_c = 0.0
        parsed = 0
        for index, part in enumerate(groups):
            batches = judge.prepare(judge.encode(part))
            if (number + index) % 2:
                seconds, cpu = bare_loop(judge, batches)
                bare_s, bare_c = bare_s + seconds, bare_c + cpu
            seconds, cpu, ok = judge_path(judge, part)
            whole_s, whole_c = whole_s + seconds, whole_c + cpu
            parsed += ok
            if not (number + index) % 2:
                seconds, cpu = bare_loop(judge, batches)
                bare_s, bare_c = bare_s + seconds, bare_c + cpu
        whole.append(whole_s)
        bare.append(bare_s)
        whole_cpu.append(whole_c)
        bare_cpu.append(bare_c)
        print(
            f"round {number}: judge path {whole_s:.2f}s = {steps / whole_s:.1f} steps/s"
            f" ({whole_c:.2f} CPU s), bare generate {bare_s:.2f}s = {steps / bare_s:.1f}"
            f" steps/s ({bare_c:.2f} CPU s)"
        )
    whole_rates = [steps / s for s in whole]
    bare_rates = [steps / s for s in bare]
    ratios = [w / b for w, b in zip(whole_rates, bare_rates, strict=True)]
    # CPU seconds of this process: less moved by neighbours on a shared machine.
    cpu_ratios = [b / w for w, b in zip(whole_cpu, bare_cpu, strict=True)]
    report: dict[str, Any] = {
        "mode": args.mode,
        "prompts": len(requests),
        "steps": steps,
        "parsed_replies": parsed,
        "repeats": args.repeat,
        "judge_steps_per_s_median": round(statistics.median(whole_rates), 2),
        "judge_steps_per_s_range": [round(min(whole_rates), 2), round(max(whole_rates), 2)],
        "bare_steps_per_s_median": round(statistics.median(bare_rates), 2),
        "bare_steps_per_s_range": [round(min(bare_rates), 2), round(max(bare_rates), 2)],
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "cpu_ratio_median": round(statistics.median(cpu_ratios), 3),
        "cpu_ratio_range": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)],
        "parameters": judge.parameter_count,
        "device": args.device,
        "dtype": args.dtype,
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "torch_threads": torch.get_num_threads(),
    }
    print(
        f"judge {report['judge_steps_per_s_median']} steps/s"
        f" (range {report['judge_steps_per_s_range']}), bare"
        f" {report['bare_steps_per_s_median']} steps/s (range {report['bare_steps_per_s_range']}),"
        f" ratio median {report['ratio_median']} (range {report['ratio_range']});"
        f" by CPU time {report['cpu_ratio_median']} (range {report['cpu_ratio_range']})"
    )
    if args.device.startswith("cuda"):
        report["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    print(json.dumps(report))


def judge_path(judge: LocalJudge, requests: list[JudgeRequest]) -> tuple[float, float, int]:
    """The whole judge path from requests to step values: wall and CPU seconds, and the
    parsed replies."""
    params = judge.params
    parsed = 0

    def on_reply(request: JudgeRequest, reply: Reply) -> None:
        nonlocal parsed
        verdict = verdict_read(params, reply.text, list(reply.tokens or ()))
        _values, problem = step_values(params, request, verdict)
        parsed += not problem

    synchronize(judge.device)
    start, cpu = time.perf_counter(), time.process_time()
    judge.check(requests)  # the run's context check, before anything is asked
    judge.judge(requests, on_reply)
    synchronize(judge.device)
    return time.perf_counter() - start, time.process_time() - cpu, parsed


def bare_loop(judge: LocalJudge, batches: list[Any]) -> tuple[float, float]:
    """``model.generate`` over prepared batches, the judge's decoding settings: wall and
    CPU seconds."""
    kwargs = {**judge.generation_kwargs(), "return_dict_in_generate": False}
    kwargs.pop("output_scores", None)
    synchronize(judge.device)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for batch in batches:
            torch.manual_seed(judge.params.seed)
            judge.model.generate(**batch.inputs, **kwargs)
    synchronize(judge.device)
    return time.perf_counter() - start, time.process_time() - cpu


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
