"""The ``model:<scorer>`` decisive-failure source (a model's failure attributions,
``FailureVerdict``): registered with labeling's decisive-failure sources by
``ScoringConfig.ready()``, since it reads scoring's table."""

from __future__ import annotations

from typing import Any

from labeling.decisive_sources import decisive_source_register
from labeling.sources import LabelSource
from scoring.models import FailureVerdict
from scoring.selectors import scorer_id_for
from trajectories.models import Project


def verdict_scorer_names(project: Project) -> list[str]:
    return sorted(
        set(
            FailureVerdict.objects.filter(trajectory__project=project).values_list(
                "scorer__name", flat=True
            )
        )
    )


@decisive_source_register("model", names=verdict_scorer_names)
def model_decisive_sql(project: Project, source: LabelSource) -> tuple[str, list[Any]]:
    scorer_id = scorer_id_for(project, source.name)
    return (
        "SELECT v.trajectory_id, v.agent, v.step FROM scoring_failureverdict v"
        " JOIN trajectories_trajectory t ON t.id = v.trajectory_id"
        " WHERE t.project_id = %s AND v.scorer_id = %s",
        [project.pk, scorer_id],
    )
