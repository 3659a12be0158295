"""A judge on transformers ``generate``: the prompts through the tokenizer's chat template,
length-sorted batches with left padding, greedy or sampled replies with the chosen
tokens' log-probabilities.

This is scoring's own small generation helper (rollouts' generator sits above scoring and
cannot be imported here); the model is loaded as every causal LM is
(``scoring.prm.causal_lm``). CUDA is touched only when a judge is loaded, inside
a Celery task.
"""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass
from typing import Any

import torch

from scoring.judges.backend import JudgeSpec, OnReply, OnTooLong, Reply, TooLong
from scoring.judges.config import JudgeError, JudgeParams, PromptTooLong
from scoring.judges.modes import JudgeRequest, describe
from scoring.judges.replies import TokenLogprob
from scoring.prm.causal_lm import CausalLM

# Prompt tokens check() keeps for encode() (4 bytes each: 16 MB at most).
COUNTED_TOKENS = 4_000_000


def _messages_key(messages: tuple[dict[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((m.get("role", ""), m.get("content", "")) for m in messages)


@dataclass
class Batch:
    requests: list[JudgeRequest]
    inputs: dict[str, torch.Tensor]  # left-padded input_ids and attention_mask
    lengths: list[int]

    @property
    def width(self) -> int:
        return int(self.inputs["input_ids"].shape[1])


class LocalJudge(CausalLM):
    """A loaded judge model. ``judge`` is the whole path; ``encode``, ``prepare``,
    ``generate`` and ``decode`` are its parts, exposed for the benchmark's bare loop."""

    spec: JudgeSpec
    params: JudgeParams

    def __init__(self, spec: JudgeSpec) -> None:
        super().__init__(spec, JudgeError)
        if not getattr(self.tokenizer, "chat_template", None):
            raise JudgeError(f"the tokenizer of {spec.model_ref!r} has no chat template")
        # Prompt tokens counted by check() and not yet asked, by the prompt's messages.
        self._counted: dict[tuple[tuple[str, str], ...], array[int]] = {}
        self._counted_tokens = 0

    # --- The parts ------------------------------------------------------------------------

    def encode(
        self, requests: list[JudgeRequest], on_too_long: OnTooLong | None = None
    ) -> list[tuple[JudgeRequest, list[int]]]:
        """Each request's prompt tokens (those :meth:`check` counted, where it kept
        them). A prompt that leaves no room for ``max_tokens`` in the model's context is
        :class:`PromptTooLong` naming the request, raised before any generation, so no
        reply of the chunk is stored; with ``on_too_long`` it is handed there instead and
        left out."""
        out = []
        for request in requests:
            key = _messages_key(request.messages)
            kept = self._counted.pop(key, None)
            if kept is not None:
                self._counted_tokens -= len(kept)
                ids = kept.tolist()
            else:
                ids = self.prompt_ids(request.messages)
            reason = self._too_long(request, ids)
            if reason is not None:
                if on_too_long is None:
                    raise PromptTooLong(request, reason)
                on_too_long(TooLong(request, reason))
                continue
            out.append((request, ids))
        return out

    def check(self, requests: list[JudgeRequest]) -> list[TooLong]:
        """Count every prompt against the context (the run's check before anything is
        asked), keeping up to ``COUNTED_TOKENS`` of their tokens (the newest) for
        :meth:`encode`, so a worker that checks its run and then asks it tokenizes each
        prompt once. Returns the prompts that do not fit."""
        too_long = []
        for request in requests:
            key = _messages_key(request.messages)
            if key in self._counted:
                continue
            ids = self.prompt_ids(request.messages)
            reason = self._too_long(request, ids)
            if reason is not None:
                too_long.append(TooLong(request, reason))
                continue
            if len(ids) > COUNTED_TOKENS:
                continue
            while self._counted and self._counted_tokens + len(ids) > COUNTED_TOKENS:
                # The oldest first: prompts of a run whose chunks another worker asked.
                oldest = next(iter(self._counted))
                self._counted_tokens -= len(self._counted.pop(oldest))
            self._counted[key] = array("i", ids)
            self._counted_tokens += len(ids)
        return too_long

    def check_finish(self) -> list[TooLong]:
        """Every prompt was counted in :meth:`check`."""
        return []

    def _too_long(self, request: JudgeRequest, ids: list[int]) -> str | None:
        if len(ids) + self.params.max_tokens <= self.max_length:
            return None
        return (
            f"the prompt for {describe(request)} is {len(ids)} tokens; with"
            f" max_tokens {self.params.max_tokens} it passes the model's context of"
            f" {self.max_length} tokens"
        )

    def prompt_ids(self, messages: tuple[dict[str, str], ...]) -> list[int]:
        """The chat template's tokens for ``messages``, ready for the reply."""
        ids = self.tokenizer.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=True
        )
        if not isinstance(ids, list):  # a BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def prepare(self, encoded: list[tuple[JudgeRequest, list[int]]]) -> list[Batch]:
        ordered = sorted(encoded, key=lambda item: len(item[1]), reverse=True)
        batches = []
        size = self.params.batch_size
        for start in range(0, len(ordered), size):
            part = ordered[start : start + size]
            width = max(len(ids) for _, ids in part)
            padded = [[self.pad_id] * (width - len(ids)) + ids for _, ids in part]
            mask = [[0] * (width - len(ids)) + [1] * len(ids) for _, ids in part]
            inputs = {
                "input_ids": torch.tensor(padded, dtype=torch.long, device=self.device),
                "attention_mask": torch.tensor(mask, dtype=torch.long, device=self.device),
            }
            batches.append(Batch([r for r, _ in part], inputs, [len(ids) for _, ids in part]))
        return batches

    def generation_kwargs(self) -> dict[str, Any]:
        params = self.params
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_tokens,
            "pad_token_id": self.pad_id,
            "eos_token_id": sorted(self.eos_ids) or None,
            "return_dict_in_generate": True,
            "output_scores": params.logprobs,
        }
        if params.temperature > 0:
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p)
            kwargs["top_k"] = 0
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        return kwargs

    def generate(self, batch: Batch) -> Any:
        torch.manual_seed(self.params.seed)
        with torch.inference_mode():
            return self.model.generate(**batch.inputs, **self.generation_kwargs())

    def decode(self, batch: Batch, output: Any, seconds: float) -> list[Reply]:
        new_tokens = output.sequences[:, batch.width :].tolist()
        logprobs = None
        top = None
        if self.params.logprobs and output.scores:
            stacked = torch.log_softmax(torch.stack(output.scores, dim=1).float(), dim=-1)
            chosen = torch.tensor(new_tokens, device=stacked.device).unsqueeze(-1)
            logprobs = stacked.gather(-1, chosen).squeeze(-1).tolist()
            if self.params.top_logprobs:
                top = torch.topk(stacked, self.params.top_logprobs, dim=-1)
        lengths = []
        for tokens in new_tokens:
            length, finish = len(tokens), "length"
            for position, token in enumerate(tokens):
                if token in self.eos_ids:
                    length, finish = position, "stop"
                    break
            lengths.append((length, finish))
        texts = self.tokenizer.batch_decode(
            [tokens[:length] for tokens, (length, _) in zip(new_tokens, lengths, strict=True)],
            skip_special_tokens=True,
        )
        details = self._details(new_tokens, lengths, logprobs, top)
        return [
            Reply(
                text=text,
                prompt_tokens=prompt_length,
                completion_tokens=length,
                latency_s=seconds,
                finish_reason=finish,
                tokens=detail,
            )
            for text, (length, finish), prompt_length, detail in zip(
                texts, lengths, batch.lengths, details, strict=True
            )
        ]

    def _details(
        self,
        new_tokens: list[list[int]],
        lengths: list[tuple[int, str]],
        logprobs: list[list[float]] | None,
        top: Any,
    ) -> list[tuple[TokenLogprob, ...] | None]:
        """Each reply's tokens with their log-probabilities and alternatives, every token
        text decoded in one call to the Rust tokenizer (a Python call per token cost a
        fifth of the tiny judge's time)."""
        if logprobs is None:
            return [None] * len(new_tokens)
        top_ids = top.indices.tolist() if top is not None else None
        top_values = top.values.tolist() if top is not None else None
        wanted: list[int] = []
        for row, tokens in enumerate(new_tokens):
            for position in range(lengths[row][0]):
                wanted.append(tokens[position])
                if top_ids is not None:
                    wanted.extend(top_ids[row][position])
        pieces = iter(
            self.tokenizer.backend_tokenizer.decode_batch(
                [[token] for token in wanted], skip_special_tokens=False
            )
        )
        out: list[tuple[TokenLogprob, ...] | None] = []
        for row, tokens in enumerate(new_tokens):
            detail = []
            for position in range(lengths[row][0]):
                text = next(pieces)
                alternatives: dict[str, float] = {}
                if top_values is not None:
                    for value in top_values[row][position]:
                        alternatives.setdefault(next(pieces), value)
                if tokens[position] not in self.special_ids:
                    detail.append(TokenLogprob(text, logprobs[row][position], alternatives))
            out.append(tuple(detail))
        return out

    # --- The whole path -------------------------------------------------------------------

    def judge(
        self, requests: list[JudgeRequest], on_reply: OnReply, on_too_long: OnTooLong | None = None
    ) -> None:
        for batch in self.prepare(self.encode(requests, on_too_long)):
            started = time.perf_counter()
            output = self.generate(batch)
            replies = self.decode(batch, output, time.perf_counter() - started)
            for request, reply in zip(batch.requests, replies, strict=True):
                on_reply(request, reply)
