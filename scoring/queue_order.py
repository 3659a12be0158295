"""What a labeling queue's "most uncertain first" order ranks by: the unlabelled steps'
scores under the project's latest trained head (``scoring.selectors.steps_most_uncertain``),
registered with labeling's queues by ``ScoringConfig.ready()``."""

from __future__ import annotations

from django.db.models import QuerySet

from labeling.services.queues import queue_uncertainty_register
from scoring.selectors import latest_trained_head, steps_most_uncertain
from trajectories.models import Project, Step


@queue_uncertainty_register
def uncertain_steps(project: Project) -> QuerySet[Step] | None:
    head = latest_trained_head(project)
    return None if head is None else steps_most_uncertain(project, head)
