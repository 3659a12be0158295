"""Where a model may be loaded from, and whether it may run its own code: the one check
that the API, the scorer form, the admin and every loader (PRM scorers, local judges,
rollout policies) go through.

A ``model_ref`` is either a local directory or a Hugging Face hub id. A directory must
lie inside one of the operator's model directories once every symlink and ``..`` in it
is resolved; a bare name (``qwen-prm`` or ``org/name``) that exists under a model
directory means that directory, otherwise it is a hub id. A hub-id-like name that is also
a directory relative to the worker's working directory is refused, because transformers
would load that directory rather than download the id.

The Django side fills :data:`POLICY_SOURCE` when the app starts (from
``STEPSCOPE_MODEL_DIRS`` and ``STEPSCOPE_ALLOW_REMOTE_CODE``); a process that never sets
it (a benchmark script loading a model itself) loads what it is told.
"""

# Django-free

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scoring.prm.base import DEFAULT_ENCODER, ScorerError

# The shape of a hub id: ``name`` or ``namespace/name``, no ``..`` (the hub's own rule).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95})?")


class ModelRefError(ScorerError):
    """A model reference or ``trust_remote_code`` the policy refuses. ``field`` names the
    scorer field at fault."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ModelPolicy:
    model_dirs: tuple[Path, ...]
    allow_remote_code: bool = False


# Set by scoring.apps at start-up: returns the policy in force (read when called, so a
# settings change in a test applies at once).
POLICY_SOURCE: Callable[[], ModelPolicy] | None = None


def current_policy() -> ModelPolicy | None:
    return POLICY_SOURCE() if POLICY_SOURCE is not None else None


def _is_hub_id(ref: str) -> bool:
    return bool(_HUB_ID.fullmatch(ref)) and ".." not in ref


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or path.is_relative_to(directory)


def model_ref_resolve(ref: str, policy: ModelPolicy | None = None) -> str:
    """The reference to load: ``ref`` itself (a hub id, or anything where no policy is in
    force) or the resolved directory. Raises :class:`ModelRefError` naming the allowed
    directories when ``ref`` points anywhere else."""
    policy = policy if policy is not None else current_policy()
    ref = ref.strip()
    if policy is None or ref == DEFAULT_ENCODER or not ref:
        return ref
    dirs = [Path(os.path.realpath(d)) for d in policy.model_dirs]
    allowed = ", ".join(str(d) for d in dirs) or "(none configured)"
    if _is_hub_id(ref):
        for directory in dirs:
            candidate = Path(os.path.realpath(directory / ref))
            if candidate.is_dir() and _inside(candidate, directory):
                return str(candidate)
        if os.path.exists(ref):
            raise ModelRefError(
                f"model_ref {ref!r} is a directory relative to the working directory, outside"
                f" the model directories ({allowed}); give its absolute path under one of them",
                field="model_ref",
            )
        return ref
    expanded = os.path.expanduser(ref)
    if not os.path.isabs(expanded):
        raise ModelRefError(
            f"model_ref {ref!r} is neither a hub id (name or namespace/name) nor an absolute"
            f" path; local models must lie under a model directory ({allowed})",
            field="model_ref",
        )
    resolved = Path(os.path.realpath(expanded))
    if not any(_inside(resolved, directory) for directory in dirs):
        raise ModelRefError(
            f"model_ref {ref!r} resolves to {resolved}, outside the model directories"
            f" ({allowed}); an operator adds directories with STEPSCOPE_MODEL_DIRS",
            field="model_ref",
        )
    return str(resolved)


def remote_code_check(trust_remote_code: bool, policy: ModelPolicy | None = None) -> None:
    """Refuse ``trust_remote_code`` unless the operator allows models to run their own
    code on this server."""
    policy = policy if policy is not None else current_policy()
    if trust_remote_code and policy is not None and not policy.allow_remote_code:
        raise ModelRefError(
            "trust_remote_code is off on this server: a model's own Python code runs only"
            " where an operator sets STEPSCOPE_ALLOW_REMOTE_CODE=1",
            field="trust_remote_code",
        )
