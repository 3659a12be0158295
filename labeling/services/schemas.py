"""Label schemas (versioned), project labeling settings and guidelines."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from labeling.models import (
    LabelSchema,
    schema_values_key_error,
)
from labeling.services.common import (
    LabelingError,
    StaleSchema,
)
from trajectories.models import Project


def _meaning(values: list[dict[str, Any]], tags: list[str]) -> tuple[Any, ...]:
    """What a label means: the values with their names, and the tags. Colours and keys
    are presentation and may change without a new version."""
    return (
        sorted((int(v["value"]), str(v["name"]), bool(v.get("error"))) for v in values),
        sorted(tags),
    )


def label_schema_save(
    *,
    schema: LabelSchema,
    kind: str,
    values: list[dict[str, Any]],
    error_tags: list[str],
    ask_rationale: bool,
    first_error_mode: bool,
) -> LabelSchema:
    """Save an edit of ``schema``. A change of values or tags makes a new version (the old
    one is deactivated and keeps its labels); other changes apply in place.

    A value whose key is one of the labeling page's own shortcuts is refused here, so
    every way a schema is saved (the page, the admin, a script) keeps the rule."""
    problem = schema_values_key_error(values)
    if problem is not None:
        raise LabelingError(f"Refused: {problem}.", field="values")
    with transaction.atomic():
        current = LabelSchema.objects.select_for_update().get(pk=schema.pk)
        if not current.is_active:
            raise StaleSchema("This schema version is no longer active; edit the newest one.")
        if kind == current.kind and _meaning(values, error_tags) == _meaning(
            current.values, current.error_tags
        ):
            current.values = values
            current.ask_rationale = ask_rationale
            current.first_error_mode = first_error_mode
            current.save(update_fields=["values", "ask_rationale", "first_error_mode"])
            return current
        latest = (
            LabelSchema.objects.filter(project_id=current.project_id, name=current.name)
            .order_by("-version")
            .values_list("version", flat=True)
            .first()
        ) or current.version
        LabelSchema.objects.filter(project_id=current.project_id, is_active=True).update(
            is_active=False
        )
        return LabelSchema.objects.create(
            project_id=current.project_id,
            name=current.name,
            kind=kind,
            values=values,
            error_tags=error_tags,
            ask_rationale=ask_rationale,
            first_error_mode=first_error_mode,
            version=latest + 1,
            is_active=True,
        )


def labeling_settings_set(
    *, project: Project, blind_labeling: bool, hide_model_scores: bool, labels_per_step: int
) -> Project:
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        settings = dict(locked.settings or {})
        settings.update(
            blind_labeling=blind_labeling,
            hide_model_scores=hide_model_scores,
            labels_per_step=labels_per_step,
        )
        locked.settings = settings
        locked.save(update_fields=["settings"])
    return locked


def project_guidelines_set(*, project: Project, guidelines: str) -> Project:
    project.guidelines = guidelines
    project.save(update_fields=["guidelines"])
    return project
