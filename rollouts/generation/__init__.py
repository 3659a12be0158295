"""Policies, Django-free: continue a trajectory prefix k times with a causal LM.

Importing this package (and ``base``, ``prompts``) loads neither torch nor Django;
``generator`` loads torch and transformers, ``vllm_backend`` vLLM.
"""

from rollouts.generation.base import (
    BACKENDS,
    EOS,
    LENGTH,
    STOP,
    Cancelled,
    Continuation,
    PolicyError,
    PolicyParams,
    PolicySpec,
    PrefixStep,
    Request,
    policy_params,
)

__all__ = [
    "BACKENDS",
    "EOS",
    "LENGTH",
    "STOP",
    "Cancelled",
    "Continuation",
    "PolicyError",
    "PolicyParams",
    "PolicySpec",
    "PrefixStep",
    "Request",
    "policy_params",
]
