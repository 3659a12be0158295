"""A causal LM loaded for ``generate``: what a rollout policy
(``rollouts.generation.generator.Generator``) and a local judge
(``scoring.judges.local.LocalJudge``) share. Model and tokenizer loading, device and dtype
rules are the scorers' (:mod:`scoring.prm.adapters`): bf16 on GPU, fp32 on CPU, the
model reference checked against the model directories. Loads torch and transformers.
"""

from __future__ import annotations

from typing import Any

from scoring.prm.adapters import (
    load_model,
    load_tokenizer,
    model_max_length,
    resolve_device,
    resolve_dtype,
)
from scoring.prm.base import ScorerError


class CausalLM:
    """``spec``: a model reference (``model_ref``, ``revision``, ``trust_remote_code``)
    whose ``params`` name ``device``, ``dtype`` and ``max_length``. A model that will not
    load raises ``error`` (the caller's own error class) with the loader's message."""

    def __init__(self, spec: Any, error: type[Exception]) -> None:
        self.spec = spec
        self.params = spec.params
        self.device = resolve_device(self.params.device)
        self.dtype = resolve_dtype(self.params.dtype, self.device)
        try:
            self.tokenizer = load_tokenizer(
                spec.model_ref, revision=spec.revision, trust_remote_code=spec.trust_remote_code
            )
            self.model = load_model(
                spec.model_ref,
                model_class="AutoModelForCausalLM",
                device=self.device,
                dtype=self.dtype,
                revision=spec.revision,
                trust_remote_code=spec.trust_remote_code,
            )
        except ScorerError as failure:
            raise error(str(failure)) from None
        self.max_length = model_max_length(self.model, self.params.max_length)
        eos = self.tokenizer.eos_token_id
        if eos is None:
            eos = getattr(self.model.generation_config, "eos_token_id", None)
        self.eos_ids: set[int] = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = min(self.eos_ids) if self.eos_ids else 0
        self.pad_id = int(pad)
        self.special_ids = set(self.tokenizer.all_special_ids)

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
