"""Model references: what a scorer (``scoring.models.Scorer``) and a policy
(``rollouts.models.Policy``) share on top of their common abstract model
(``scoring.models.ModelReference``): the one check a new or edited reference passes (the
services, the API, the forms and the admin all make it), and the API's rule for who may
add one.

Where the model may be loaded from and whether it may run its own code is
``scoring.prm.model_refs``, applied here with the operator's settings and again by every
loader on the workers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Required, TypedDict, TypeVar

from django.contrib.auth.models import User
from django.db import models, transaction
from rest_framework.exceptions import PermissionDenied

from scoring.model_policy import model_policy
from scoring.prm.model_refs import ModelRefError, model_ref_resolve, remote_code_check
from trajectories.models import Project

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,50}")

R = TypeVar("R", bound=models.Model)


class ReferenceFields(TypedDict, total=False):
    """What a service creating a model reference takes (``scorer_create``,
    ``policy_create``), besides what its own kind adds; :func:`reference_values` fills in
    the defaults."""

    name: Required[str]
    model_ref: str
    project: Project | None
    revision: str
    parameters: dict[str, Any] | None
    queue: str
    trust_remote_code: bool
    user: User | None


def reference_values(fields: ReferenceFields) -> dict[str, Any]:
    """``fields`` with the defaults of what they leave out: the model's columns."""
    return {
        "project": fields.get("project"),
        "name": fields["name"],
        "model_ref": fields.get("model_ref", ""),
        "revision": fields.get("revision", ""),
        "parameters": dict(fields.get("parameters") or {}),
        "queue": fields.get("queue", "gpu"),
        "trust_remote_code": fields.get("trust_remote_code", False),
        "created_by": fields.get("user"),
    }


def reference_request(
    data: Mapping[str, Any], *, project: Project | None, user: User
) -> ReferenceFields:
    """The reference fields of an API request's validated data, for ``project`` (see
    :func:`reference_owner`) and by ``user``."""
    return {
        "project": project,
        "user": user,
        "name": data["name"],
        "model_ref": data.get("model_ref", ""),
        "revision": data.get("revision", ""),
        "parameters": data.get("parameters") or {},
        "queue": data.get("queue", "gpu"),
        "trust_remote_code": data.get("trust_remote_code", False),
    }


def reference_create(
    model: type[R], values: Mapping[str, Any], *, unique: tuple[str, ...]
) -> R | None:
    """A new row of ``model`` (a checked reference), or None where one with the same
    ``unique`` values exists (the caller says so its own way). Runs in the caller's
    transaction, or its own."""
    with transaction.atomic():
        if model._default_manager.filter(**{name: values[name] for name in unique}).exists():
            return None
        return model._default_manager.create(**values)


def reference_check(
    *,
    model_ref: str,
    queue: str,
    trust_remote_code: bool,
    needs_model: str = "",
    loads_locally: bool = True,
) -> None:
    """Refuse a reference that names no model where it needs one (``needs_model`` is
    what it is told), a queue name a worker cannot take, a local model outside the
    operator's model directories, or remote code where the operator has not allowed it.
    Raises :class:`~scoring.prm.model_refs.ModelRefError` naming the field."""
    if needs_model and not model_ref.strip():
        raise ModelRefError(needs_model, field="model_ref")
    if not QUEUE_NAME.fullmatch(queue):
        raise ModelRefError("queue names are letters, digits, '.', '_' and '-'", field="queue")
    policy = model_policy()
    if loads_locally:
        model_ref_resolve(model_ref, policy)
    remote_code_check(trust_remote_code, policy)


def reference_owner(
    user: User,
    data: Mapping[str, Any],
    *,
    noun: str,
    managed_project: Callable[[str], Project],
) -> Project | None:
    """The project a reference the API is asked to add belongs to (None: every project),
    once the user may add it there: ``managed_project`` raises for a project the user
    does not manage, one for every project needs staff, and so does running the model's
    own code (where the operator forbids it outright, the check says so, 400, instead)."""
    project: Project | None = data.get("project")
    if project is not None:
        project = managed_project(project.slug)
    elif not getattr(user, "is_staff", False):
        raise PermissionDenied(f"Only staff may add a {noun} for every project.")
    if (
        data.get("trust_remote_code")
        and model_policy().allow_remote_code
        and not getattr(user, "is_staff", False)
    ):
        raise PermissionDenied("Only staff may allow a model to run its own code.")
    return project
