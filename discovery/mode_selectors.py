"""Named reads of failure modes: a user's runs and modes (404 for outsiders, 403 for
annotators where the failures page is), a run's modes with their example steps and how
each splits by model, agent, tool and task; and the same of note runs, whose groups show
example notes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import QuerySet
from django.http import Http404

from discovery.models import FailureMode, FailureModeRun, NoteGroup, NoteRun
from evaluation.compare_steps import step_href
from labeling.models import EpisodeVerdict
from labeling.selectors import can_compare
from trajectories.models import Project
from trajectories.selectors import STEP_PREVIEW_CHARS, project_get_for_user

# The values each split shows, most members first.
SPLIT_TOP = 3
SPLITS = {
    "model": "t.model_name",
    "agent": "s.agent",
    "tool": "s.tool_name",
    "task": "t.task_key",
}
RUNS_SHOWN = 5


def failure_modes_readable(user: Any, project: Project) -> None:
    """Modes are made of everyone's first errors: readers as for the failures page
    (outsiders 404; annotators 403 where the project hides labels or model scores)."""
    project_get_for_user(user, project.slug)
    if not can_compare(user, project):
        raise PermissionDenied(
            "This project hides labels or model scores from annotators until they submit."
        )


def failure_mode_run_get_for_user(user: Any, pk: int) -> FailureModeRun:
    run = FailureModeRun.objects.select_related("project", "judge").filter(pk=pk).first()
    if run is None:
        raise Http404("No such failure-mode run.")
    failure_modes_readable(user, run.project)
    return run


def failure_mode_get_for_user(user: Any, pk: int) -> FailureMode:
    mode = FailureMode.objects.select_related("run__project").filter(pk=pk).first()
    if mode is None:
        raise Http404("No such failure mode.")
    failure_modes_readable(user, mode.run.project)
    return mode


def failure_mode_runs(project: Project) -> QuerySet[FailureModeRun]:
    return FailureModeRun.objects.filter(project=project).select_related("judge")


def failure_mode_run_latest(project: Project) -> FailureModeRun | None:
    return failure_mode_runs(project).filter(status=FailureModeRun.Status.DONE).first()


@dataclass(frozen=True)
class Example:
    step_id: int
    trajectory_id: int
    external_id: str
    index: int
    preview: str

    @property
    def href(self) -> str:
        return step_href(self.trajectory_id, self.index, self.step_id)


@dataclass
class ModeView:
    mode: FailureMode
    examples: list[Example] = field(default_factory=list)
    # split name -> [(value, members)], most members first
    splits: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


def failure_modes_shown(run: FailureModeRun) -> list[ModeView]:
    """The run's modes, largest first, with their examples and splits: three queries."""
    views = [ModeView(mode) for mode in run.modes.all()]
    by_id = {view.mode.pk: view for view in views}
    example_ids = [step for view in views for step in view.mode.examples]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.id, s.trajectory_id, t.external_id, s.index,"
            f" left(coalesce(nullif(s.content, ''), s.tool_name), {STEP_PREVIEW_CHARS})"
            " FROM trajectories_step s JOIN trajectories_trajectory t ON t.id = s.trajectory_id"
            " WHERE s.id = ANY(%s)",
            [example_ids],
        )
        examples = {row[0]: Example(*row) for row in cursor.fetchall()}
        parts = " UNION ALL ".join(
            f"SELECT m.mode_id, '{name}', coalesce({column}, ''), count(*)"
            " FROM discovery_failuremodemember m"
            " JOIN trajectories_step s ON s.id = m.step_id"
            " JOIN trajectories_trajectory t ON t.id = m.trajectory_id"
            " JOIN discovery_failuremode f ON f.id = m.mode_id"
            f" WHERE f.run_id = %s GROUP BY 1, 3"
            for name, column in SPLITS.items()
        )
        cursor.execute(parts, [run.pk] * len(SPLITS))
        counted = cursor.fetchall()
    for view in views:
        view.examples = [examples[s] for s in view.mode.examples if s in examples]
        view.splits = {name: [] for name in SPLITS}
    for mode_id, name, value, count in counted:
        by_id[mode_id].splits[name].append((value or "(none)", int(count)))
    for view in views:
        for values in view.splits.values():
            values.sort(key=lambda pair: (-pair[1], pair[0]))
            del values[SPLIT_TOP:]
    return views


# --- Note groups (notes to taxonomy) ---------------------------------------------------

NOTE_PREVIEW_CHARS = 300


def note_run_get_for_user(user: Any, pk: int) -> NoteRun:
    run = NoteRun.objects.select_related("project").filter(pk=pk).first()
    if run is None:
        raise Http404("No such note run.")
    failure_modes_readable(user, run.project)  # everyone's notes: as failure modes
    return run


def note_group_get_for_user(user: Any, pk: int) -> NoteGroup:
    group = NoteGroup.objects.select_related("run__project").filter(pk=pk).first()
    if group is None:
        raise Http404("No such note group.")
    failure_modes_readable(user, group.run.project)
    return group


def note_runs(project: Project) -> QuerySet[NoteRun]:
    return NoteRun.objects.filter(project=project)


def note_run_latest(project: Project) -> NoteRun | None:
    return note_runs(project).filter(status=NoteRun.Status.DONE).first()


@dataclass(frozen=True)
class NoteExample:
    verdict_id: int
    trajectory_id: int
    external_id: str
    text: str


@dataclass
class NoteGroupView:
    group: NoteGroup
    examples: list[NoteExample] = field(default_factory=list)


def note_groups_shown(run: NoteRun) -> list[NoteGroupView]:
    """The run's groups, largest first, each with its example notes: two queries."""
    views = [NoteGroupView(group) for group in run.groups.all()]
    wanted = [pk for view in views for pk in view.group.examples]
    found = {
        pk: NoteExample(pk, trajectory_id, external_id, text[:NOTE_PREVIEW_CHARS])
        for pk, trajectory_id, external_id, text in EpisodeVerdict.objects.filter(
            pk__in=wanted
        ).values_list("pk", "trajectory_id", "trajectory__external_id", "critique")
    }
    for view in views:
        view.examples = [found[pk] for pk in view.group.examples if pk in found]
    return views
