"""Policies: create, check and describe them for a worker."""

from __future__ import annotations

from typing import Any, Unpack

from rollouts import generation
from rollouts.models import Policy
from scoring.prm.model_refs import ModelRefError
from scoring.references import (
    ReferenceFields,
    reference_check,
    reference_create,
    reference_values,
)

POLICY_NEEDS_MODEL = "a policy needs a model reference (directory or hub id)"


class RolloutError(Exception):
    """A request the rollout services refuse, with a message for the user."""


def policy_check(
    *, model_ref: str, parameters: dict[str, Any], queue: str, trust_remote_code: bool = False
) -> None:
    """Refuse a policy that cannot run as configured, whose model lies outside the
    operator's model directories, or that would run its own code where that is off (the
    check every model reference passes, ``scoring.references.reference_check``; the
    loaders make it again on the workers)."""
    try:
        generation.policy_params(parameters)
        reference_check(
            model_ref=model_ref,
            queue=queue,
            trust_remote_code=trust_remote_code,
            needs_model=POLICY_NEEDS_MODEL,
        )
    except (generation.PolicyError, ModelRefError) as error:
        raise RolloutError(str(error)) from None


def policy_create(**fields: Unpack[ReferenceFields]) -> Policy:
    """A policy; its parameters are checked before it is saved."""
    values = reference_values(fields)
    policy_check(
        model_ref=values["model_ref"],
        parameters=values["parameters"],
        queue=values["queue"],
        trust_remote_code=values["trust_remote_code"],
    )
    policy = reference_create(Policy, values, unique=("name", "project"))
    if policy is None:
        raise RolloutError(f"a policy {values['name']!r} exists already")
    return policy


def policy_spec(policy: Policy) -> generation.PolicySpec:
    return generation.PolicySpec(
        model_ref=policy.model_ref,
        params=generation.policy_params(policy.parameters),
        revision=policy.revision,
        trust_remote_code=policy.trust_remote_code,
    )
