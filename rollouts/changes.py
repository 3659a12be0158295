"""Whether anything a project's summaries read has changed since they were made.

The export page's counts and the compare and failure summaries are passes over a
project's labels, scores, Monte Carlo values or credits: seconds at a million steps. They
are kept and made again only when something they read may have changed:

- a label or final label of the project written or deleted: the label history
  (``StepLabelEvent``, ``FinalLabelEvent``, written by triggers on every insert, change
  and delete, ``COPY`` included) is read from the kept high-water marks on, the new events
  only (a label written in another project is seen to be elsewhere);
- the project's scoring runs, rollout jobs or finished attribution runs (how many, how far
  they got: the scores, Monte Carlo values and credits they write), its members, or its
  number of trajectories (what an import or a deletion changes).

Here, at the rollouts layer, because it reads labeling, scoring and rollouts, and both
exports and evaluation keep summaries with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Max, Sum

from labeling.models import FinalLabelEvent, StepLabelEvent
from rollouts.models import RolloutJob
from scoring.models import AttributionRun, ScoringRun
from trajectories.models import Project, Step

# Past this many label events since the marks, a summary is made again without looking
# at which project the events are in.
EVENTS_LOOKED_AT = 10_000


@dataclass(frozen=True)
class ProjectMarks:
    """The label history's high-water marks (anywhere) and the project's job progress."""

    events: tuple[int, int]
    inputs: tuple[Any, ...]

    def as_json(self) -> list[Any]:
        return [list(self.events), _plain(self.inputs)]

    @classmethod
    def from_json(cls, data: list[Any]) -> ProjectMarks:
        events, inputs = data
        return cls(events=(int(events[0]), int(events[1])), inputs=_tuples(inputs))


def project_marks(project: Project) -> ProjectMarks:
    """Read before a summary is made, so a write during the making is seen next time.
    A handful of small queries: two index lookups and one aggregate a small table."""
    return ProjectMarks(events=event_marks(), inputs=job_marks(project))


def changed_since(project: Project, kept: ProjectMarks, now: ProjectMarks) -> bool:
    return kept.inputs != now.inputs or labels_changed(project, kept.events, now.events)


def event_marks() -> tuple[int, int]:
    """The newest label and final-label history events, anywhere (two index lookups)."""
    return (
        StepLabelEvent.objects.aggregate(mark=Max("pgh_id"))["mark"] or 0,
        FinalLabelEvent.objects.aggregate(mark=Max("pgh_id"))["mark"] or 0,
    )


def labels_changed(project: Project, kept: tuple[int, int], now: tuple[int, int]) -> bool:
    """Whether a label or final label of the project changed between the marks ``kept``
    and ``now``: the steps of the events between them (an index range on the events),
    looked up in the project; past ``EVENTS_LOOKED_AT`` events, changed."""
    for model, since, until in zip((StepLabelEvent, FinalLabelEvent), kept, now, strict=True):
        if until == since:
            continue
        if until < since:
            return True  # events removed: history rewritten, count again
        steps = list(
            model.objects.filter(pgh_id__gt=since, pgh_id__lte=until)
            .order_by()
            .values_list("step_id", flat=True)[: EVENTS_LOOKED_AT + 1]
        )
        if len(steps) > EVENTS_LOOKED_AT:
            return True
        # A deleted step's events name a step that is gone: its labels are counted no more.
        present = Step.objects.filter(pk__in=set(steps))
        if present.filter(trajectory__project=project).exists() or present.count() < len(
            set(steps)
        ):
            return True
    return False


def job_marks(project: Project) -> tuple[Any, ...]:
    """How many of the project's scoring runs, rollout jobs and finished attribution runs
    there are and how far they got, its members and its trajectories: small tables or an
    index, one query each."""
    scoring = ScoringRun.objects.filter(project=project).aggregate(
        runs=Count("pk"), newest=Max("pk"), done=Sum("done"), chunks=Sum("chunks_done")
    )
    rollouts = RolloutJob.objects.filter(project=project).aggregate(
        jobs=Count("pk"), newest=Max("pk"), done=Sum("done"), chunks=Sum("chunks_done")
    )
    credits = AttributionRun.objects.filter(
        project=project, status=AttributionRun.Status.DONE
    ).aggregate(runs=Count("pk"), newest=Max("pk"))
    members = project.memberships.aggregate(members=Count("pk"), newest=Max("pk"))
    return (
        tuple(scoring.values()),
        tuple(rollouts.values()),
        tuple(credits.values()),
        tuple(members.values()),
        project.trajectories.count(),
    )


def _plain(value: Any) -> Any:
    return [_plain(item) for item in value] if isinstance(value, tuple) else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(item) for item in value) if isinstance(value, list) else value
