"""Reads of review (adjudication): the trajectories to review and one trajectory's
labels side by side."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from django.db.models import Count, OuterRef, Prefetch, Subquery
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, Left, Length

from labeling.models import (
    FinalLabel,
    LabelSchema,
    StepLabel,
)
from trajectories.models import Project, Step, Trajectory
from trajectories.selectors import STEP_PREVIEW_CHARS
from trajectories.services.projects import IMPORTED_ANNOTATOR_PREFIX

REVIEW_PAGE_SIZE = 50


def review_candidates(project: Project, schema: LabelSchema) -> list[Trajectory]:
    """Trajectories with submitted labels from at least two annotators on ``schema``, the
    most disagreements first. Each carries ``annotators`` (how many), ``disagreements``
    (steps whose labels differ) and ``finalized`` (steps with a final label)."""
    # Steps, not labels: a step counts once however many labels it has. (Grouped by the
    # ORM, the step grouping was folded into the trajectory's, and the count was every
    # label of a trajectory with any disagreement.)
    disagreeing = RawSQL(
        "SELECT count(*) FROM (SELECT l.step_id FROM labeling_steplabel l"
        " JOIN trajectories_step s ON s.id = l.step_id"
        " JOIN auth_user u ON u.id = l.annotator_id"
        " WHERE s.trajectory_id = trajectories_trajectory.id AND l.schema_id = %s"
        " AND l.status = 'submitted' AND u.username NOT LIKE %s"
        " GROUP BY l.step_id HAVING count(DISTINCT l.value) > 1) d",
        [schema.pk, IMPORTED_ANNOTATOR_PREFIX + "%"],
    )
    annotators = (
        StepLabel.objects.filter(
            schema=schema, step__trajectory=OuterRef("pk"), status=StepLabel.Status.SUBMITTED
        )
        .exclude(annotator__username__startswith=IMPORTED_ANNOTATOR_PREFIX)
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
            disagreements=disagreeing,
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
    # The annotators' names, one per cell (``ReviewTable.annotators``): a phone shows each
    # cell as a card's line under its annotator's name.
    names: list[str] = dataclasses.field(default_factory=list)

    @property
    def named_cells(self) -> list[tuple[str, StepLabel | None]]:
        return list(zip(self.names, self.cells, strict=True))

    @property
    def tags(self) -> set[str]:
        return {tag for cell in self.cells if cell for tag in cell.tags or ()}


# What the review page's filter keeps: a row's test, and its name in the filter.
REVIEW_SHOWS = {
    "all": "every labelled step",
    "disagreements": "where annotators disagree",
    "unresolved": "disagreements without a final label",
    "notes": "labels with tags, a rationale or a correction",
}


@dataclass
class ReviewTable:
    annotators: list[str]
    rows: list[ReviewRow]
    # Counted over every row, whatever the filter shows.
    steps: int = 0
    disagreements: int = 0
    unresolved: int = 0
    finalized: int = 0
    tags: list[str] = dataclasses.field(default_factory=list)

    def filtered(self, show: str, tag: str = "") -> list[ReviewRow]:
        """The rows ``show`` (a key of ``REVIEW_SHOWS``) and ``tag`` (if given) keep."""
        rows = self.rows
        if show == "disagreements":
            rows = [r for r in rows if r.disagreement]
        elif show == "unresolved":
            rows = [r for r in rows if r.disagreement and r.final is None]
        elif show == "notes":
            rows = [r for r in rows if any(_noted(c) for c in r.cells)]
        if tag:
            rows = [r for r in rows if tag in r.tags]
        return rows


def _noted(label: StepLabel | None) -> bool:
    return label is not None and bool(label.tags or label.rationale or label.correction)


def review_table(trajectory: Trajectory, schema: LabelSchema) -> ReviewTable:
    """Every annotator's submitted label per labelable step side by side (value, tags,
    rationale, correction), with the final label and whether the annotators disagree.
    Imported labels are shown as annotators (a reviewer compares against them too), but
    a disagreement is, as on the review list, between people's submitted labels, so the
    list's count and the table's marked rows are the same steps."""
    steps = list(
        Step.objects.filter(trajectory=trajectory, labelable=True)
        .defer("content", "metadata")
        .annotate(
            content_preview=Left("content", STEP_PREVIEW_CHARS), content_length=Length("content")
        )
        .prefetch_related(
            Prefetch(
                "labels",
                queryset=StepLabel.objects.filter(
                    schema=schema, status=StepLabel.Status.SUBMITTED
                ).select_related("annotator"),
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
        people = [
            label.value
            for name, label in by_name.items()
            if not name.startswith(IMPORTED_ANNOTATOR_PREFIX)
        ]
        values = people or [label.value for label in by_name.values()]
        majority = max(set(values), key=values.count) if values else None
        finals = list(step.final_labels.all())
        rows.append(
            ReviewRow(
                step=step,
                cells=[by_name.get(name) for name in names],
                final=finals[0] if finals else None,
                disagreement=len(set(people)) > 1,
                majority=majority,
                names=names,
            )
        )
    return ReviewTable(
        annotators=names,
        rows=rows,
        steps=len(rows),
        disagreements=sum(r.disagreement for r in rows),
        unresolved=sum(r.disagreement and r.final is None for r in rows),
        finalized=sum(r.final is not None for r in rows),
        tags=sorted({tag for r in rows for tag in r.tags}),
    )
