"""Reads of review (adjudication): the trajectories to review and one trajectory's
labels side by side."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, OuterRef, Prefetch, Subquery
from django.db.models.functions import Coalesce, Left, Length

from labeling.models import (
    FinalLabel,
    LabelSchema,
    StepLabel,
)
from trajectories.models import Project, Step, Trajectory
from trajectories.selectors import STEP_PREVIEW_CHARS

REVIEW_PAGE_SIZE = 50


def review_candidates(project: Project, schema: LabelSchema) -> list[Trajectory]:
    """Trajectories with submitted labels from at least two annotators on ``schema``, the
    most disagreements first. Each carries ``annotators`` (how many), ``disagreements``
    (steps whose labels differ) and ``finalized`` (steps with a final label)."""
    per_step = (
        StepLabel.objects.filter(
            schema=schema, step__trajectory=OuterRef("pk"), status=StepLabel.Status.SUBMITTED
        )
        .exclude(annotator__username__startswith="import:")
        .values("step_id")
    )
    disagreeing = (
        per_step.annotate(kinds=Count("value", distinct=True))
        .filter(kinds__gt=1)
        .values("step__trajectory")
        .annotate(n=Count("step_id"))
        .values("n")
    )
    annotators = (
        StepLabel.objects.filter(
            schema=schema, step__trajectory=OuterRef("pk"), status=StepLabel.Status.SUBMITTED
        )
        .exclude(annotator__username__startswith="import:")
        .values("step__trajectory")
        .annotate(n=Count("annotator_id", distinct=True))
        .values("n")
    )
    finalized = (
        FinalLabel.objects.filter(schema=schema, step__trajectory=OuterRef("pk"))
        .values("step__trajectory")
        .annotate(n=Count("id"))
        .values("n")
    )
    return list(
        Trajectory.objects.filter(project=project)
        .only("id", "external_id", "model_name", "step_count", "success")
        .annotate(
            annotators=Coalesce(Subquery(annotators), 0),
            disagreements=Coalesce(Subquery(disagreeing), 0),
            finalized=Coalesce(Subquery(finalized), 0),
        )
        .filter(annotators__gte=2)
        .order_by("-disagreements", "-id")[:REVIEW_PAGE_SIZE]
    )


@dataclass
class ReviewRow:
    step: Step
    cells: list[StepLabel | None]  # one per annotator, in ``ReviewTable.annotators`` order
    final: FinalLabel | None
    disagreement: bool
    majority: int | None


@dataclass
class ReviewTable:
    annotators: list[str]
    rows: list[ReviewRow]


def review_table(trajectory: Trajectory, schema: LabelSchema) -> ReviewTable:
    """Every annotator's label per labelable step side by side, with the final label and
    whether the annotators disagree. Imported labels count as annotators here: a reviewer
    compares against them too."""
    steps = list(
        Step.objects.filter(trajectory=trajectory, labelable=True)
        .defer("content", "metadata")
        .annotate(
            content_preview=Left("content", STEP_PREVIEW_CHARS), content_length=Length("content")
        )
        .prefetch_related(
            Prefetch(
                "labels",
                queryset=StepLabel.objects.filter(schema=schema).select_related("annotator"),
            ),
            Prefetch(
                "final_labels",
                queryset=FinalLabel.objects.filter(schema=schema).select_related("adjudicator"),
            ),
        )
        .order_by("index")
    )
    names = sorted(
        {label.annotator.get_username() for step in steps for label in step.labels.all()}
    )
    rows = []
    for step in steps:
        by_name = {label.annotator.get_username(): label for label in step.labels.all()}
        values = [label.value for label in by_name.values()]
        majority = max(set(values), key=values.count) if values else None
        finals = list(step.final_labels.all())
        rows.append(
            ReviewRow(
                step=step,
                cells=[by_name.get(name) for name in names],
                final=finals[0] if finals else None,
                disagreement=len(set(values)) > 1,
                majority=majority,
            )
        )
    return ReviewTable(annotators=names, rows=rows)
