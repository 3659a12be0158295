"""The project home's step counts, kept (``evaluation.kept``): how many steps may be
labelled and how many carry a label are passes over every step of the project, 1.4 s at
a million steps; the home shows the kept counts with their age while a worker counts
again (the trajectory and step totals are read each time: the trajectory rows keep
their step counts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from labeling.selectors import labelled_step_count
from trajectories.models import Project
from trajectories.selectors import labelable_step_count

PAGE = "home"


@dataclass(frozen=True)
class StepCounts:
    labelable: int
    labelled: int


def step_counts(project: Project, params: Mapping[str, str]) -> StepCounts:
    return StepCounts(
        labelable=labelable_step_count(project), labelled=labelled_step_count(project)
    )
