"""The demo's policy: a small causal LM that Stepscope trains itself, on CPU, on the
arithmetic problems ``trajectories.synthetic`` generates (no Django, no downloads).

It learns the demo's step format (``Step 3: 27 - 9 = 18`` lines, then ``The answer is
N.``) from correct solutions only, with extra drills on the arithmetic, so it solves
most problems (about five in six after 1200 steps, some six minutes on two CPU cores)
and slips now and then, mostly on long multiplications. Given a prefix that already
holds a slip it carries the wrong number forward, as the synthetic rollouts do, which is
what makes Monte Carlo rollouts from its steps informative: continuations succeed before
the first error and fail after it.

    report = train(out_dir)                   # tokenizer + Llama-style model, saved
    figures = evaluate(out_dir, tasks=50)     # solve rate on the demo's problems

The training problems come from the same generator as the demo project's, with other
seeds, so the demo's own problems stay unseen.
"""

# Django-free: trained and loaded without a database.
from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trajectories import synthetic

# The demo project is generated with seed 7 (demo/management/commands/demo_setup.py);
# training seeds start far from it.
TRAINING_SEED = 1000
# 2: three layers of 96 (was four of 128): the same solve rate in under half the time.
VERSION = 2
# The policy's name in the database: one global policy that the demo projects share.
POLICY_NAME = "demo-policy"
# How the policy renders a prompt; stored as the Policy's parameters.
PARAMETERS: dict[str, Any] = {
    "prompt_format": "plain",
    "task_format": "{task}\n",
    "step_join": "\n",
    "temperature": 0.7,
    "top_p": 1.0,
    "max_new_tokens": 160,
    "batch_size": 64,
    # One thread: steady on a machine that also runs the web server and PostgreSQL
    # (see PolicyParams.cpu_threads).
    "cpu_threads": 1,
}
EOS = "<|endoftext|>"
PAD = "<pad>"


@dataclass(frozen=True)
class TrainingReport:
    path: str
    version: int
    parameters: int
    steps: int
    examples: int
    seconds: float
    final_loss: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def solution_text(record: dict[str, Any]) -> tuple[str, str]:
    """(prompt, solution) for one synthetic record, in the policy's prompt format."""
    prompt = PARAMETERS["task_format"].format(task=record["task"])
    solution = PARAMETERS["step_join"].join(step["content"] for step in record["steps"])
    return prompt, solution


def correct_solutions(*, seed: int, tasks: int) -> Iterator[tuple[str, str]]:
    """Prompt and solution of every rollout that never slips (one per task)."""
    for record in synthetic.rollouts(tasks=tasks, rollouts_per_task=1, seed=seed):
        if record["first_error_index"] == -1:
            yield solution_text(record)
        else:
            # The generator slips half the time; rebuild the clean chain from the task.
            yield solution_text(_clean(record))


def _clean(record: dict[str, Any]) -> dict[str, Any]:
    task = record["task"]
    start = int(task.split("Start from ")[1].split(" ")[0])
    chain_text = task.split("in order: ")[1].rsplit(". What", 1)[0]
    value = start
    steps = []
    for number, item in enumerate(chain_text.split(", "), start=1):
        op, operand_text = item.split(" ")
        operand = int(operand_text)
        result = value + operand if op == "+" else value - operand if op == "-" else value * operand
        steps.append({"content": f"Step {number}: {value} {op} {operand} = {result}"})
        value = result
    steps.append({"content": f"The answer is {value}."})
    return {**record, "steps": steps}


def build_tokenizer(texts: list[str]) -> Any:
    """Byte-level BPE that keeps every digit its own token (arithmetic is learnt digit by
    digit) while words and the step format merge into few tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=PAD)


def build_model(tokenizer: Any, *, layers: int = 4, hidden: int = 192, seed: int = 0) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 32),
        num_key_value_heads=max(1, hidden // 32),
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def drill_text(rng: random.Random, lines: int = 10) -> str:
    """A chain of steps without a task, multiplication-heavy, its numbers in the demo's
    range: extra practice on the arithmetic, the part a small model finds hardest."""
    value = rng.randint(2, 99)
    out = []
    for number in range(1, lines + 1):
        op = rng.choice("+-**") if abs(value) < 20_000 else rng.choice("+-")
        operand = rng.randint(2, 9)
        result = value + operand if op == "+" else value - operand if op == "-" else value * operand
        out.append(f"Step {number}: {value} {op} {operand} = {result}")
        value = result
    return "\n".join(out)


_RESULT = re.compile(r"= (-?\d+)")


def _weighted(
    tokenizer: Any, text: str, *, loss_from: int, other: float, result: float
) -> tuple[list[int], list[float]]:
    """Token ids of ``text`` and a loss weight per token: none before character
    ``loss_from`` (the task), ``result`` on the digits after each ``=``, ``other``
    elsewhere."""
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = [m.span(1) for m in _RESULT.finditer(text)]
    weights = []
    for begin, end in encoded["offset_mapping"]:
        if begin < loss_from:
            weights.append(0.0)
        elif any(a <= begin and end <= b for a, b in spans):
            weights.append(result)
        else:
            weights.append(other)
    return list(encoded["input_ids"]), weights


def _part_loss(
    model: Any, part: list[tuple[list[int], list[float]]], pad: int, functional: Any
) -> Any:
    """The summed weighted next-token loss of ``part``'s sequences, padded to the longest."""
    import torch

    width = max(len(ids) for ids, _ in part)
    ids = torch.full((len(part), width), pad, dtype=torch.long)
    weights = torch.zeros((len(part), width))
    mask = torch.zeros((len(part), width), dtype=torch.long)
    for row, (sequence, weight) in enumerate(part):
        ids[row, : len(sequence)] = torch.tensor(sequence)
        weights[row, : len(sequence)] = torch.tensor(weight)
        mask[row, : len(sequence)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    losses = functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    )
    return (losses * weights[:, 1:].reshape(-1)).sum()


def train(
    out_dir: Path,
    *,
    minutes: float = 15.0,
    max_steps: int = 1200,
    batch_size: int = 32,
    layers: int = 3,
    hidden: int = 96,
    drill_fraction: float = 0.25,
    result_weight: float = 2.0,
    peak_lr: float = 3e-3,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    progress: Callable[[float], None] | None = None,
) -> TrainingReport:
    """Train for ``max_steps`` (or ``minutes`` of wall time, whichever comes first), save
    model and tokenizer to ``out_dir`` with a ``stepscope-demo-policy.json`` report, and
    return the report. 1200 steps of the default three layers of 96 take about six
    minutes on two CPU cores (0.28 s a step idle, 352 s under `make run`) and solve 0.84
    of the demo's problems; four layers of 128 took 0.47 s a step (794 s under `make
    run`) to solve 0.85 (``evaluate(path, tasks=50, samples=4)``).

    ``progress`` is told after every step how much of the run is done (0 to 1, by steps
    or by time, whichever is further).

    Each batch mixes worked problems (loss on the solution, not the task) with drills
    (loss on the results only); result digits weigh ``result_weight`` times the rest.
    """
    import torch
    import torch.nn.functional as functional

    if "OMP_NUM_THREADS" not in os.environ:
        # Every core, unless told otherwise: on a machine shared with other work, one
        # thread (OMP_NUM_THREADS=1) can train faster than threads that wait on each other,
        # unless they sleep while they wait (OMP_WAIT_POLICY=PASSIVE, as under `make run`).
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    torch.manual_seed(seed)
    rng = random.Random(seed)
    drills = round(batch_size * drill_fraction)
    problems = batch_size - drills
    # A fresh problem for every example: the generator is endless and cheap.
    stream = correct_solutions(seed=TRAINING_SEED + seed, tasks=10**9)
    first = list(itertools.islice(stream, 5000))
    pairs = itertools.chain(first, stream)
    tokenizer = build_tokenizer([p + s for p, s in first])
    model = build_model(tokenizer, layers=layers, hidden=hidden, seed=seed)
    model.train()
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id

    def problem() -> tuple[list[int], list[float]]:
        prompt, solution = next(pairs)
        ids, weights = _weighted(
            tokenizer, prompt + solution, loss_from=len(prompt), other=1.0, result=result_weight
        )
        return [*ids, eos], [*weights, 1.0]

    def drill() -> tuple[list[int], list[float]]:
        return _weighted(tokenizer, drill_text(rng), loss_from=0, other=0.0, result=result_weight)

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=peak_lr, betas=(0.9, 0.98), weight_decay=0.01
    )
    budget = minutes * 60
    warmup = 100
    start = time.monotonic()
    step = 0
    loss_value = math.nan
    while step < max_steps and time.monotonic() - start < budget:
        # Warm up, hold, then decay over the last fifth of the run, measured in steps or
        # in time, whichever runs out first: on a busy machine the time cap ends the run
        # before max_steps, and the schedule still lands.
        done = max((time.monotonic() - start) / budget, step / max_steps)
        left = 1.0 - done
        lr = peak_lr * min(1.0, (step + 1) / warmup) * max(0.05, min(1.0, left / 0.2))
        for group in optimizer.param_groups:
            group["lr"] = lr
        # Problems and drills go through the model as two parts, each padded to its own
        # longest sequence (drills run longer than problems: one padded batch spent a
        # fifth of its tokens on padding); the gradient is the whole batch's, each part's
        # weighted loss divided by the batch's total weight.
        parts = [
            [problem() for _ in range(problems)],
            [drill() for _ in range(drills)],
        ]
        total_weight = sum(sum(weight[1:]) for part in parts for _, weight in part)
        optimizer.zero_grad(set_to_none=True)
        loss_value = 0.0
        for part in parts:
            if part:
                part_loss = _part_loss(model, part, pad, functional) / total_weight
                part_loss.backward()
                loss_value += float(part_loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if progress:
            progress(max((time.monotonic() - start) / budget, step / max_steps))
        if log and step % 50 == 0:
            log(f"step {step}: loss {loss_value:.4f}, lr {lr:.2e}, {time.monotonic() - start:.0f}s")
    seconds = time.monotonic() - start
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = pad
    model.generation_config.eos_token_id = eos
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    report = TrainingReport(
        path=str(out_dir),
        version=VERSION,
        parameters=sum(p.numel() for p in model.parameters()),
        steps=step,
        examples=step * batch_size,
        seconds=round(seconds, 1),
        final_loss=round(loss_value, 4),
    )
    (out_dir / "stepscope-demo-policy.json").write_text(json.dumps(report.to_dict(), indent=2))
    return report


def evaluate(path: Path, *, tasks: int = 50, seed: int = 7, samples: int = 1) -> dict[str, Any]:
    """Solve rate on the problems ``synthetic.rollouts(seed=seed)`` poses (seed 7: the
    demo project's), through the real generation path with the demo parameters."""
    from rollouts import answers
    from rollouts.generation import PolicySpec, Request, policy_params
    from rollouts.generation.generator import generator_build

    records = list(synthetic.rollouts(tasks=tasks, rollouts_per_task=1, seed=seed))
    params = policy_params({**PARAMETERS, "device": "cpu"})
    generator = generator_build(PolicySpec(model_ref=str(path), params=params))
    requests = [
        Request(key=n, task=r["task"], steps=(), samples=samples, seed=n)
        for n, r in enumerate(records)
    ]
    results = generator.generate(requests)
    check = answers.check_parse("numeric")
    solved = 0
    for result in results:
        record = records[result.key]
        truth = answers.CheckedTrajectory(record["task"], record["ground_truth"], ())
        continuation = answers.CheckedContinuation((), result.steps, result.text, result.finished)
        solved += answers.check_answer(check, truth, continuation)
    return {"problems": len(records), "samples": len(results), "solve_rate": solved / len(results)}
