"""Reads for rubrics and episode verdicts: the project's current rubrics, one user's
marks and verdicts on a trajectory for the labeling page, and what the API shows.

Blind mode applies as to step labels: an annotator of a blind project sees only their
own marks and verdicts until they submit the trajectory (``LabelingState.blind``);
reviewers and everyone in a project that is not blind see every annotator's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Exists, OuterRef, Subquery

from labeling.models import EpisodeVerdict, Rubric, RubricMark, TrajectoryLabel
from labeling.rubric_sources import rubric_kind_marks
from labeling.rubrics import rubric_score
from labeling.selectors.surface import LabelingState
from trajectories.models import Project


def rubrics_active(project: Project | int) -> list[Rubric]:
    """The newest active version of each of the project's rubrics, by name."""
    project_id = project if isinstance(project, int) else project.pk
    newest = (
        Rubric.objects.filter(project_id=project_id, name=OuterRef("name"), is_active=True)
        .order_by("-version")
        .values("id")[:1]
    )
    return list(
        Rubric.objects.filter(project_id=project_id, is_active=True, id=Subquery(newest)).order_by(
            "name"
        )
    )


@dataclass(frozen=True)
class JudgeMark:
    """An LLM judge's mark on a criterion, shown beside a person's (read-only)."""

    judge: str
    mark: str
    evidence: tuple[int, ...]


@dataclass
class CriterionRow:
    position: int
    text: str
    weight: float
    condition: str
    mark: str = ""
    evidence: list[int] = field(default_factory=list)
    judges: list[JudgeMark] = field(default_factory=list)


@dataclass
class RubricResult:
    """One annotator's marks on one rubric version for one trajectory, and the score."""

    rubric: Rubric
    annotator: str
    rows: list[CriterionRow]
    # The requesting user's own result (on a current rubric, marked or not).
    own: bool = False

    @property
    def score(self) -> float | None:
        return rubric_score(self.rubric.criteria, {r.position: r.mark for r in self.rows})

    @property
    def marked(self) -> int:
        return sum(1 for r in self.rows if r.mark)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rubric": self.rubric.name,
            "rubric_id": self.rubric.pk,
            "version": self.rubric.version,
            "annotator": self.annotator,
            "score": self.score,
            "criteria": [
                {
                    "criterion": r.position,
                    "text": r.text,
                    "weight": r.weight,
                    "condition": r.condition,
                    "mark": r.mark,
                    "evidence": r.evidence,
                }
                for r in self.rows
            ],
        }


def _result(
    rubric: Rubric, annotator: str, marks: list[RubricMark], *, own: bool = False
) -> RubricResult:
    by_position = {m.criterion: m for m in marks}
    rows = []
    for position, criterion in enumerate(rubric.criteria):
        mark = by_position.get(position)
        rows.append(
            CriterionRow(
                position=position,
                text=criterion["text"],
                weight=float(criterion.get("weight", 1)),
                condition=criterion.get("condition", ""),
                mark=mark.mark if mark else "",
                evidence=list(mark.evidence) if mark else [],
            )
        )
    return RubricResult(rubric=rubric, annotator=annotator, rows=rows, own=own)


def rubric_results(state: LabelingState, *, mine_only: bool = False) -> list[RubricResult]:
    """The rubric results on the trajectory this user may see: their own on each current
    rubric (unmarked rows included), then other annotators' (on any version they marked)
    unless blind mode hides them or ``mine_only``. Two queries."""
    current = rubrics_active(state.project)
    marks = RubricMark.objects.filter(trajectory_id=state.trajectory.pk).select_related(
        "rubric", "annotator"
    )
    if mine_only or state.blind:
        marks = marks.filter(annotator_id=state.user_id)
    grouped: dict[tuple[int, int], list[RubricMark]] = {}
    names: dict[int, str] = {}
    rubrics: dict[int, Rubric] = {r.pk: r for r in current}
    for mark in marks.order_by("annotator__username", "rubric__name", "rubric__version"):
        grouped.setdefault((mark.annotator_id, mark.rubric_id), []).append(mark)
        names[mark.annotator_id] = mark.annotator.username
        rubrics.setdefault(mark.rubric_id, mark.rubric)
    results = []
    me = state.user_id
    own_name = names.get(me, "")
    for rubric in current:
        results.append(_result(rubric, own_name, grouped.pop((me, rubric.pk), []), own=True))
    for (annotator_id, rubric_id), items in grouped.items():
        results.append(_result(rubrics[rubric_id], names[annotator_id], items))
    return results


def rubric_judge_marks_add(state: LabelingState, results: list[RubricResult]) -> None:
    """Put each judge's marks on this trajectory beside the user's own rows (the current
    rubrics), unless the project hides model scores from this user (an annotator before
    they submit, as for the step scores): a judge's mark is a model's answer too."""
    if not state.show_model_scores:
        return
    for result in results:
        if not result.own:
            continue
        for judge, marks in rubric_kind_marks(result.rubric, "judge", state.trajectory.pk):
            for row in result.rows:
                if row.position in marks:
                    mark, evidence = marks[row.position]
                    row.judges.append(JudgeMark(judge=judge, mark=mark, evidence=evidence))


def episode_verdicts(state: LabelingState, *, mine_only: bool = False) -> list[EpisodeVerdict]:
    """The episode verdicts on the trajectory this user may see (their own, and others'
    unless blind mode hides them), the episode's before the agents'."""
    verdicts = EpisodeVerdict.objects.filter(trajectory_id=state.trajectory.pk).select_related(
        "annotator"
    )
    if mine_only or state.blind:
        verdicts = verdicts.filter(annotator_id=state.user_id)
    return list(verdicts.order_by("annotator__username", "agent"))


def rubric_exports(
    username: str, trajectory_ids: list[int]
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, list[dict[str, Any]]]]:
    """For exports: ``username``'s rubric results and episode verdicts on those of
    ``trajectory_ids`` they submitted, by trajectory id. A result is ``{"rubric",
    "version", "score", "criteria": [{"criterion", "mark", "evidence"}]}`` (rubrics by
    name, then version; criteria in rubric order, unmarked ones left out); a verdict
    ``{"agent", "outcome", "failure_mode", "critique"}``, the episode's first. Two queries."""
    submitted = TrajectoryLabel.objects.filter(
        trajectory_id=OuterRef("trajectory_id"),
        annotator__username=username,
        status=TrajectoryLabel.Status.SUBMITTED,
    )
    marks = (
        RubricMark.objects.filter(trajectory_id__in=trajectory_ids, annotator__username=username)
        .filter(Exists(submitted))
        .select_related("rubric")
        .order_by("trajectory_id", "rubric__name", "rubric__version", "criterion")
    )
    grouped: dict[tuple[int, int], list[RubricMark]] = {}
    for mark in marks:
        grouped.setdefault((mark.trajectory_id, mark.rubric_id), []).append(mark)
    results: dict[int, list[dict[str, Any]]] = {}
    for (trajectory_id, _), items in grouped.items():
        rubric = items[0].rubric
        results.setdefault(trajectory_id, []).append(
            {
                "rubric": rubric.name,
                "version": rubric.version,
                "score": rubric_score(rubric.criteria, {m.criterion: m.mark for m in items}),
                "criteria": [
                    {"criterion": m.criterion, "mark": m.mark, "evidence": list(m.evidence)}
                    for m in items
                ],
            }
        )
    verdicts: dict[int, list[dict[str, Any]]] = {}
    for trajectory_id, agent, outcome, failure_mode, critique in (
        EpisodeVerdict.objects.filter(
            trajectory_id__in=trajectory_ids, annotator__username=username
        )
        .filter(Exists(submitted))
        .order_by("trajectory_id", "agent")
        .values_list("trajectory_id", "agent", "outcome", "failure_mode", "critique")
    ):
        verdicts.setdefault(trajectory_id, []).append(
            {"agent": agent, "outcome": outcome, "failure_mode": failure_mode, "critique": critique}
        )
    return results, verdicts
