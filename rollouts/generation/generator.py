"""Continuations with transformers ``generate``: load a policy once per process, render
and tokenize prefixes, run length-sorted batches with left padding, cut the generated
text into steps.

CUDA is touched only when a policy is loaded, which happens inside a Celery task (never
in the parent worker process before it forks its pool). Model and tokenizer loading,
device and dtype rules are the scorers' (``scoring.prm.adapters``): bf16 on GPU, fp32 on
CPU. When ``vllm`` is installed and the policy runs on a GPU, :func:`generator_build`
returns the vLLM backend instead.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rollouts.generation.base import (
    EOS,
    LENGTH,
    STOP,
    Cancelled,
    Continuation,
    PolicyError,
    PolicyParams,
    PolicySpec,
    Request,
)
from rollouts.generation.prompts import (
    cut_at_final_answer,
    cut_at_stop,
    render_prompt,
    split_steps,
)
from scoring.prm.adapters import resolve_device
from scoring.prm.batching import left_truncated
from scoring.prm.cache import LOADED
from scoring.prm.causal_lm import CausalLM

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Item:
    """One continuation to generate: a sample of a request, its prompt tokenized."""

    request: Request
    sample: int
    ids: tuple[int, ...]
    dropped: int


@dataclass
class Batch:
    items: list[Item]
    inputs: dict[str, torch.Tensor]  # left-padded input_ids and attention_mask
    seed: int

    @property
    def width(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


class PolicyGenerator(Protocol):
    spec: PolicySpec
    params: PolicyParams

    def generate(
        self, requests: list[Request], *, should_stop: Callable[[], bool] | None = None
    ) -> list[Continuation]: ...


class Generator(CausalLM):
    """A loaded policy on transformers. ``generate`` is the whole path; ``prepare``,
    ``run`` and ``decode`` are its parts, exposed for the benchmark's bare loop."""

    spec: PolicySpec

    def __init__(self, spec: PolicySpec) -> None:
        super().__init__(spec, PolicyError)
        if self.params.max_new_tokens >= self.max_length:
            raise PolicyError(
                f"max_new_tokens {self.params.max_new_tokens} leaves no room for a prompt"
                f" in the model's {self.max_length} positions"
            )
        # Halved on CUDA out-of-memory and kept small for the life of the process.
        self.batch_size = self.params.batch_size

    # --- The parts ------------------------------------------------------------------------

    def encode(self, requests: list[Request]) -> list[Item]:
        """One item per sample, its prompt tokenized and cut from the left to fit."""
        if not requests:
            return []
        prompts = [
            render_prompt(self.params, r.task, r.steps, tokenizer=self.tokenizer) for r in requests
        ]
        # A plain prompt gets the tokenizer's own special tokens (a BOS); a chat template
        # writes them itself.
        encoded = self.tokenizer(
            prompts, add_special_tokens=self.params.prompt_format == "plain", verbose=False
        )["input_ids"]
        room = self.max_length - self.params.max_new_tokens
        items = []
        for request, ids in zip(requests, encoded, strict=True):
            keep_first = 1 if ids and ids[0] in self.special_ids else 0
            kept, dropped = left_truncated(list(ids), room, keep_first=keep_first)
            for offset in range(request.samples):
                items.append(Item(request, request.first_sample + offset, tuple(kept), dropped))
        return items

    def prepare(self, items: list[Item], batch_size: int | None = None) -> list[Batch]:
        """Longest prompts first, ``batch_size`` items a batch, padded on the left so
        every row's new tokens start at the same column."""
        size = batch_size or self.batch_size
        ordered = sorted(items, key=lambda item: len(item.ids), reverse=True)
        batches = []
        for start in range(0, len(ordered), size):
            part = ordered[start : start + size]
            width = max(len(item.ids) for item in part)
            ids = [[self.pad_id] * (width - len(i.ids)) + list(i.ids) for i in part]
            mask = [[0] * (width - len(i.ids)) + [1] * len(i.ids) for i in part]
            inputs = {
                "input_ids": torch.tensor(ids, dtype=torch.long, device=self.device),
                "attention_mask": torch.tensor(mask, dtype=torch.long, device=self.device),
            }
            # Seeded from its first item, so a chunk run again samples the same text.
            first = part[0]
            seed = (first.request.seed * 1_000_003 + first.sample) % (2**31)
            batches.append(Batch(part, inputs, seed))
        return batches

    def generation_kwargs(self) -> dict[str, Any]:
        params = self.params
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids) or None,
        }
        if params.temperature > 0:
            # top_k 0 turns the model's own default (often 50) off.
            kwargs.update(
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k,
            )
        else:
            kwargs["do_sample"] = False
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        return kwargs

    @contextmanager
    def threads(self) -> Iterator[None]:
        """Generate with the policy's ``cpu_threads`` (on CPU), then give torch back its
        own setting: a worker process also runs scorers, which keep theirs."""
        wanted = self.params.cpu_threads if self.device.type == "cpu" else 0
        before = torch.get_num_threads()
        if not wanted or wanted == before:
            yield
            return
        torch.set_num_threads(wanted)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def run(self, batch: Batch) -> torch.Tensor:
        """The new tokens of one batch, shape (rows, generated length)."""
        torch.manual_seed(batch.seed)
        with torch.inference_mode(), self.threads():
            output = self.model.generate(**batch.inputs, **self.generation_kwargs())
        return output[:, batch.width :]

    def decode(self, batch: Batch, new_tokens: torch.Tensor) -> list[Continuation]:
        out = []
        for item, row in zip(batch.items, new_tokens.tolist(), strict=True):
            length = len(row)
            finish = LENGTH
            for position, token in enumerate(row):
                if token in self.eos_ids:
                    length, finish = position, EOS
                    break
            text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
            text, stopped = cut_at_stop(text, self.params.stop)
            text, answered = cut_at_final_answer(text)
            if stopped or answered:
                finish = STOP
            out.append(
                Continuation(
                    key=item.request.key,
                    sample=item.sample,
                    text=text,
                    steps=split_steps(self.params, text),
                    finish_reason=finish,
                    new_tokens=length,
                    prompt_tokens=len(item.ids),
                    dropped_tokens=item.dropped,
                )
            )
        return out

    # --- The whole path -------------------------------------------------------------------

    def generate(
        self, requests: list[Request], *, should_stop: Callable[[], bool] | None = None
    ) -> list[Continuation]:
        """Every sample of every request, in request order. ``should_stop`` is asked
        between batches; when it says so, :class:`Cancelled` is raised. On CUDA
        out-of-memory the batch is halved and retried; one sequence that does not fit is
        an error."""
        pending = self.prepare(self.encode(requests))
        results: list[Continuation] = []
        while pending:
            if should_stop is not None and should_stop():
                raise Cancelled
            batch = pending.pop(0)
            try:
                new_tokens = self.run(batch)
            except torch.OutOfMemoryError as error:
                if len(batch.items) == 1:
                    raise PolicyError(
                        f"out of memory generating from one prompt of {batch.width} tokens;"
                        " lower max_length or max_new_tokens"
                    ) from error
                self.batch_size = max(1, len(batch.items) // 2)
                logger.warning("out of memory; batch size now %d", self.batch_size)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                pending = self.prepare(batch.items, self.batch_size) + pending
                continue
            results.extend(self.decode(batch, new_tokens))
        by_item = {(c.key, c.sample): c for c in results}
        return [
            by_item[(r.key, r.first_sample + offset)]
            for r in requests
            for offset in range(r.samples)
        ]


# --- One load per worker process -----------------------------------------------------------


def generator_load(spec: PolicySpec) -> PolicyGenerator:
    """The loaded policy for ``spec``, built on first use in this process and kept in the
    worker's one model cache (shared with the scorers)."""
    return LOADED.get(f"policy:{spec.key}", lambda: generator_build(spec))


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def generator_build(spec: PolicySpec) -> PolicyGenerator:
    """A new generator for ``spec``, not cached (tests and benchmarks). ``backend``
    ``auto`` takes vLLM on a GPU where it is installed, transformers otherwise."""
    backend = spec.params.backend
    if backend == "vllm" and not vllm_available():
        raise PolicyError("backend 'vllm' asked for, but vllm is not installed on this worker")
    if backend == "auto":
        on_gpu = resolve_device(spec.params.device).type == "cuda"
        backend = "vllm" if on_gpu and vllm_available() else "transformers"
    if backend == "vllm":
        from rollouts.generation.vllm_backend import VLLMGenerator

        return VLLMGenerator(spec)
    return Generator(spec)
