"""Policies: create, check and describe them for a worker."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from rollouts import generation
from rollouts.models import Policy
from scoring.prm.model_refs import ModelRefError
from scoring.references import reference_check
from trajectories.models import Project

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


def policy_create(
    *,
    name: str,
    model_ref: str,
    project: Project | None = None,
    revision: str = "",
    parameters: dict[str, Any] | None = None,
    queue: str = "gpu",
    trust_remote_code: bool = False,
    user: User | None = None,
) -> Policy:
    """A policy; its parameters are checked before it is saved."""
    parameters = dict(parameters or {})
    policy_check(
        model_ref=model_ref,
        parameters=parameters,
        queue=queue,
        trust_remote_code=trust_remote_code,
    )
    with transaction.atomic():
        if Policy.objects.filter(name=name, project=project).exists():
            raise RolloutError(f"a policy {name!r} exists already")
        return Policy.objects.create(
            project=project,
            name=name,
            model_ref=model_ref,
            revision=revision,
            parameters=parameters,
            queue=queue,
            trust_remote_code=trust_remote_code,
            created_by=user,
        )


def policy_spec(policy: Policy) -> generation.PolicySpec:
    return generation.PolicySpec(
        model_ref=policy.model_ref,
        params=generation.policy_params(policy.parameters),
        revision=policy.revision,
        trust_remote_code=policy.trust_remote_code,
    )
