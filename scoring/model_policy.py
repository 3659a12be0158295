"""The operator's model policy (``STEPSCOPE_MODEL_DIRS``, ``STEPSCOPE_ALLOW_REMOTE_CODE``)
as ``scoring.prm.model_refs`` applies it; installed there when the app starts."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from scoring.prm.model_refs import ModelPolicy


def model_policy() -> ModelPolicy:
    return ModelPolicy(
        model_dirs=tuple(Path(d) for d in settings.STEPSCOPE_MODEL_DIRS),
        allow_remote_code=bool(settings.STEPSCOPE_ALLOW_REMOTE_CODE),
    )
