"""The ``model:<scorer>`` label source (a scorer's step scores, >= threshold good, else
bad), which ``consensus`` fills in with too: registered with labeling's label sources by
``ScoringConfig.ready()``, since it reads scoring's tables."""

from __future__ import annotations

from typing import Any

from labeling.sources import LabelSource, label_source_register
from scoring.selectors import scorer_id_for
from trajectories.models import Project


@label_source_register("model")
def model_source_sql(project: Project, source: LabelSource, scoped: bool) -> tuple[str, list[Any]]:
    scorer_id = scorer_id_for(project, source.name)
    threshold = source.threshold
    select = (
        "SELECT sc.step_id, CASE WHEN sc.value >= %s THEN 1 ELSE -1 END AS value"
        " FROM scoring_stepscore sc"
    )
    if not scoped:
        return f"{select} WHERE sc.scorer_id = %s", [threshold, scorer_id]
    return (
        f"{select}"
        " JOIN trajectories_step s ON s.id = sc.step_id"
        " JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
        " WHERE t.project_id = %s AND sc.scorer_id = %s",
        [threshold, project.pk, scorer_id],
    )
