"""The ``rubric:judge:<scorer>`` rubric source (an LLM judge's rubric marks,
``JudgeRubricMark``): registered with labeling's rubric sources by ``ScoringConfig.ready()``,
since it reads scoring's table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labeling.models import Rubric
from labeling.rubric_sources import RubricSource, rubric_source_register
from scoring.models import JudgeRubricMark
from scoring.selectors import scorer_id_for
from trajectories.models import Project


def judge_names(rubric: Rubric) -> list[str]:
    return sorted(
        set(JudgeRubricMark.objects.filter(rubric=rubric).values_list("scorer__name", flat=True))
    )


@rubric_source_register("judge", names=judge_names)
def judge_rubric_sql(
    project: Project, rubric_ids: Sequence[int], source: RubricSource
) -> tuple[str, list[Any]]:
    scorer_id = scorer_id_for(project, source.name)
    return (
        "SELECT j.trajectory_id, j.rubric_id, j.criterion, j.mark, j.evidence"
        " FROM scoring_judgerubricmark j WHERE j.rubric_id = ANY(%s) AND j.scorer_id = %s",
        [list(rubric_ids), scorer_id],
    )
