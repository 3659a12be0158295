"""Label schemas (versioned), project labeling settings and guidelines."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from labeling.models import (
    LabelSchema,
    applies_to_error,
    schema_keys_clash,
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


def _check(
    project_id: int, name: str, values: list[dict[str, Any]], applies_to: dict[str, Any]
) -> None:
    """Refuse keys the labeling page uses, keys another active schema of the project
    labels with, and an ``applies_to`` of the wrong shape; each names the field."""
    problem = schema_values_key_error(values)
    if problem is not None:
        raise LabelingError(f"Refused: {problem}.", field="values")
    others = list(
        LabelSchema.objects.filter(project_id=project_id, is_active=True).exclude(name=name)
    )
    problem = schema_keys_clash(values, others)
    if problem is not None:
        raise LabelingError(f"Refused: {problem}.", field="values")
    problem = applies_to_error(applies_to)
    if problem is not None:
        raise LabelingError(f"Refused: {problem}.", field="applies_to")


def label_schema_save(
    *,
    schema: LabelSchema,
    kind: str,
    values: list[dict[str, Any]],
    error_tags: list[str],
    ask_rationale: bool,
    first_error_mode: bool,
    applies_to: dict[str, Any] | None = None,
) -> LabelSchema:
    """Save an edit of ``schema``. A change of values or tags makes a new version (the old
    one is deactivated and keeps its labels); other changes apply in place. The project's
    other schemas stay as they are.

    A value whose key is one of the labeling page's own shortcuts, or one another active
    schema of the project labels with, is refused here, so every way a schema is saved
    (the page, the admin, a script) keeps the rule. ``applies_to`` None keeps the
    schema's."""
    applies = dict(schema.applies_to or {}) if applies_to is None else applies_to
    with transaction.atomic():
        # Saves of one project's schemas take turns, so two cannot take one key.
        LabelSchema.objects.select_for_update().filter(project_id=schema.project_id).exists()
        current = LabelSchema.objects.select_for_update().get(pk=schema.pk)
        _check(current.project_id, current.name, values, applies)
        if not current.is_active:
            raise StaleSchema("This schema version is no longer active; edit the newest one.")
        if kind == current.kind and _meaning(values, error_tags) == _meaning(
            current.values, current.error_tags
        ):
            current.values = values
            current.ask_rationale = ask_rationale
            current.first_error_mode = first_error_mode
            current.applies_to = applies
            current.save(
                update_fields=["values", "ask_rationale", "first_error_mode", "applies_to"]
            )
            return current
        latest = (
            LabelSchema.objects.filter(project_id=current.project_id, name=current.name)
            .order_by("-version")
            .values_list("version", flat=True)
            .first()
        ) or current.version
        LabelSchema.objects.filter(
            project_id=current.project_id, name=current.name, is_active=True
        ).update(is_active=False)
        return LabelSchema.objects.create(
            project_id=current.project_id,
            name=current.name,
            kind=kind,
            values=values,
            error_tags=error_tags,
            ask_rationale=ask_rationale,
            first_error_mode=first_error_mode,
            applies_to=applies,
            version=latest + 1,
            is_active=True,
        )


def label_schema_create(
    *,
    project: Project,
    name: str,
    kind: str,
    values: list[dict[str, Any]],
    error_tags: list[str] | None = None,
    ask_rationale: bool = False,
    first_error_mode: bool = False,
    applies_to: dict[str, Any] | None = None,
) -> LabelSchema:
    """Add a label schema (a new dimension) to ``project``, labelled beside its others.
    Its name is new to the project (a slash may not be in it: label sources name a
    schema after one) and its keys are its own."""
    name = name.strip()
    if not name or "/" in name or len(name) > 100:
        raise LabelingError(
            f"Refused: a schema's name is 1 to 100 characters without a slash, not {name!r}.",
            field="name",
        )
    if kind not in LabelSchema.Kind.values:
        raise LabelingError(
            f"Refused: kind {kind!r} is not one of {', '.join(LabelSchema.Kind.values)}.",
            field="kind",
        )
    applies = applies_to or {}
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).exists()
        LabelSchema.objects.select_for_update().filter(project=project).exists()
        if LabelSchema.objects.filter(project=project, name=name).exists():
            raise LabelingError(
                f"Refused: project {project.slug!r} has a schema named {name!r} already.",
                field="name",
            )
        _check(project.pk, name, values, applies)
        return LabelSchema.objects.create(
            project=project,
            name=name,
            kind=kind,
            values=values,
            error_tags=list(error_tags or []),
            ask_rationale=ask_rationale,
            first_error_mode=first_error_mode,
            applies_to=applies,
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
