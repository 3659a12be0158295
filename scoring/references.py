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
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework.exceptions import PermissionDenied

from scoring.model_policy import model_policy
from scoring.prm.model_refs import ModelRefError, model_ref_resolve, remote_code_check
from trajectories.models import Project

QUEUE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,50}")


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
    user: AbstractBaseUser | AnonymousUser,
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
