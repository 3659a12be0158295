"""Continuations with vLLM, used instead of transformers on a GPU worker that has
``vllm`` installed. Same requests in, same continuations out: the prompts are rendered
and truncated by the transformers path's own code, so both backends see one prompt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollouts.generation.base import (
    EOS,
    LENGTH,
    STOP,
    Continuation,
    PolicyError,
    PolicySpec,
    Request,
)
from rollouts.generation.prompts import render_prompt, split_steps
from scoring.prm.adapters import load_tokenizer, resolve_model_ref
from scoring.prm.batching import left_truncated

_DTYPES = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class VLLMGenerator:
    def __init__(self, spec: PolicySpec) -> None:
        from vllm import LLM

        self.spec = spec
        self.params = spec.params
        self.tokenizer = load_tokenizer(
            spec.model_ref, revision=spec.revision, trust_remote_code=spec.trust_remote_code
        )
        try:
            self.llm = LLM(
                model=resolve_model_ref(spec.model_ref),
                revision=spec.revision or None,
                trust_remote_code=spec.trust_remote_code,
                dtype=_DTYPES[self.params.dtype],
                max_model_len=self.params.max_length,
                seed=0,
            )
        except Exception as error:  # vLLM raises many kinds on a model it cannot serve
            raise PolicyError(f"vLLM cannot load {spec.model_ref!r}: {error}") from error

    def generate(
        self, requests: list[Request], *, should_stop: Callable[[], bool] | None = None
    ) -> list[Continuation]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not requests:
            return []
        params = self.params
        texts = [render_prompt(params, r.task, r.steps, tokenizer=self.tokenizer) for r in requests]
        encoded = self.tokenizer(
            texts, add_special_tokens=params.prompt_format == "plain", verbose=False
        )["input_ids"]
        room = params.max_length - params.max_new_tokens
        prompts: list[Any] = []
        sampling = []
        dropped = []
        for request, ids in zip(requests, encoded, strict=True):
            kept, cut = left_truncated(list(ids), room, keep_first=0)
            dropped.append((len(kept), cut))
            prompts.append(TokensPrompt(prompt_token_ids=kept))
            sampling.append(
                SamplingParams(
                    n=request.samples,
                    temperature=params.temperature,
                    top_p=params.top_p,
                    top_k=params.top_k or -1,
                    max_tokens=params.max_new_tokens,
                    stop=list(params.stop) or None,
                    # One seed per request: a chunk run again samples the same text.
                    seed=(request.seed * 1_000_003 + request.first_sample) % (2**31),
                )
            )
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        results = []
        for request, output, (prompt_tokens, cut) in zip(requests, outputs, dropped, strict=True):
            for offset, completion in enumerate(output.outputs):
                if completion.finish_reason == "length":
                    finish = LENGTH
                elif completion.stop_reason is None or isinstance(completion.stop_reason, int):
                    finish = EOS
                else:
                    finish = STOP
                results.append(
                    Continuation(
                        key=request.key,
                        sample=request.first_sample + offset,
                        text=completion.text,
                        steps=split_steps(params, completion.text),
                        finish_reason=finish,
                        new_tokens=len(completion.token_ids),
                        prompt_tokens=prompt_tokens,
                        dropped_tokens=cut,
                    )
                )
        return results
