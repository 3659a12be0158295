"""Writing an LLM judge's rubric marks (``JudgeRubricMark``, the rubric source
``judge:<scorer>``): what a judge run in the ``rubric`` mode stores, a mark per criterion
per trajectory, each checked against its rubric version and trajectory (the criterion one
of the rubric's, the evidence steps the trajectory's) before any is written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from labeling.models import Rubric
from labeling.rubrics import MARKS
from scoring.models import JudgeRubricMark, Scorer, ScoringRun
from scoring.services.runners import ScoringError
from trajectories.models import Trajectory


@dataclass(frozen=True)
class RubricMarkInput:
    trajectory_id: int
    criterion: int
    mark: str
    evidence: tuple[int, ...] = ()
    reply_id: int | None = None


def judge_rubric_marks_write(
    *,
    scorer: Scorer,
    rubric: Rubric,
    marks: Sequence[RubricMarkInput],
    run: ScoringRun | None = None,
) -> int:
    """Write (or replace) ``scorer``'s marks on ``rubric``, all or nothing; a ScoringError
    names the mark (its position and trajectory) and the field. Trajectories must be in
    the rubric's project. Three queries and one upsert per 2000 marks, whatever the
    count. Returns how many were written."""
    ids = {m.trajectory_id for m in marks}
    known = {
        pk: (project_id, step_count)
        for pk, project_id, step_count in Trajectory.objects.filter(pk__in=ids).values_list(
            "pk", "project_id", "step_count"
        )
    }
    rows: dict[tuple[int, int], JudgeRubricMark] = {}
    for number, item in enumerate(marks):
        where = f"mark {number} (trajectory {item.trajectory_id})"
        project_id, step_count = known.get(item.trajectory_id, (None, 0))
        if project_id != rubric.project_id:
            raise ScoringError(f"{where}, field 'trajectory': no such trajectory in the project")
        if not 0 <= item.criterion < len(rubric.criteria):
            raise ScoringError(
                f"{where}, field 'criterion': {item.criterion} is not one of rubric"
                f" {rubric.name!r} v{rubric.version}'s (0 to {len(rubric.criteria) - 1})"
            )
        if item.mark not in MARKS:
            raise ScoringError(f"{where}, field 'mark': {item.mark!r} is not one of {MARKS}")
        bad = [s for s in item.evidence if not 0 <= s < step_count]
        if bad:
            raise ScoringError(f"{where}, field 'evidence': step {bad[0]} is not one of its steps")
        rows[(item.trajectory_id, item.criterion)] = JudgeRubricMark(
            trajectory_id=item.trajectory_id,
            scorer=scorer,
            rubric=rubric,
            run=run,
            reply_id=item.reply_id,
            criterion=item.criterion,
            mark=item.mark,
            evidence=sorted(set(item.evidence)),
        )
    with transaction.atomic():
        JudgeRubricMark.objects.bulk_create(
            list(rows.values()),
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["trajectory", "scorer", "rubric", "criterion"],
            update_fields=["run", "reply", "mark", "evidence", "updated_at"],
        )
    return len(rows)
