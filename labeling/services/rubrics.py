"""Writes for rubrics and episode verdicts (issue #36): an admin saves a rubric (a new
version each time), an annotator marks its criteria for a trajectory with their evidence
steps, and answers the episode's questions, for the whole run or for one of its agents.

Marks and verdicts are the annotator's own, like their step labels: the same permission
(reviewers anywhere in the project, annotators on what a queue leased them), the same
history (a pghistory event per change, marked with the action), the same blind mode on
reads (``labeling.selectors.rubrics``)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Max

from labeling.models import EpisodeVerdict, LabelSchema, Rubric, RubricMark
from labeling.rubrics import (
    MARKS,
    MAX_CRITIQUE_CHARS,
    RubricInvalid,
    criteria_clean,
    evidence_clean,
)
from labeling.selectors import LabelingState
from labeling.services.common import (
    LabelingError,
    StaleSchema,
    history_context,
    require_can_label,
)
from labeling.services.decisive import agent_steps
from trajectories.agents import agent_name
from trajectories.models import Project

MAX_RUBRIC_NAME = 100


def rubric_save(
    *, project: Project, user_id: int | None, criteria: Any, name: str = "rubric"
) -> Rubric:
    """Save ``criteria`` as the newest version of the project's rubric ``name`` (the
    first version when it has none). The caller checked that the user is an admin.
    Errors name the criterion and field (``criteria.1.weight``)."""
    name = (name or "").strip()
    if not name or len(name) > MAX_RUBRIC_NAME:
        raise LabelingError(f"name: 1 to {MAX_RUBRIC_NAME} characters", field="name")
    try:
        cleaned = criteria_clean(criteria)
    except RubricInvalid as error:
        raise LabelingError(str(error), field="criteria") from None
    with transaction.atomic():
        # Lock the project row: two admins saving at once get versions one after the other.
        Project.objects.select_for_update().filter(pk=project.pk).first()
        newest = Rubric.objects.filter(project=project, name=name).aggregate(v=Max("version"))
        return Rubric.objects.create(
            project=project,
            name=name,
            criteria=cleaned,
            version=(newest["v"] or 0) + 1,
            created_by_id=user_id,
        )


def _current_rubric(state: LabelingState, rubric_id: int) -> Rubric:
    rubric = Rubric.objects.filter(pk=rubric_id).first()
    if rubric is None or rubric.project_id != state.project.pk:
        raise LabelingError("That rubric does not belong to this project.", field="rubric")
    newest = (
        Rubric.objects.filter(project_id=rubric.project_id, name=rubric.name, is_active=True)
        .order_by("-version")
        .values_list("version", flat=True)
        .first()
    )
    if newest != rubric.version:
        now = f"the project now uses v{newest}" if newest else "it is no longer used"
        raise StaleSchema(
            f"The rubric {rubric.name!r} changed (this page uses v{rubric.version}, {now})."
            " Reload the page to mark the new version.",
            field="rubric",
        )
    return rubric


def rubric_mark_set(
    *,
    state: LabelingState,
    rubric_id: int,
    criterion: int,
    mark: str | None = None,
    evidence: list[int] | None = None,
    toggle_step: int | None = None,
) -> RubricMark | None:
    """Set this user's mark on one criterion of the rubric for the trajectory: ``mark``
    (``met``, ``not_met``, ``na``; ``""`` takes the mark and its evidence away, None
    keeps it), ``evidence`` (step indexes, replacing the links) or ``toggle_step`` (links
    or unlinks one step). Evidence on a criterion not yet marked is refused. Returns the
    mark, or None when it was taken away."""
    require_can_label(state)
    rubric = _current_rubric(state, rubric_id)
    if not 0 <= criterion < len(rubric.criteria):
        raise LabelingError(
            f"criterion: rubric {rubric.name!r} v{rubric.version} has criteria 0 to"
            f" {len(rubric.criteria) - 1}, not {criterion}",
            field="criterion",
        )
    if mark is not None and mark != "" and mark not in MARKS:
        raise LabelingError(
            f"mark: {mark!r} is not one of {', '.join(MARKS)} (or empty to clear)", field="mark"
        )
    step_count = state.trajectory.step_count
    try:
        if evidence is not None:
            evidence = evidence_clean(evidence, step_count)
        if toggle_step is not None:
            evidence_clean([toggle_step], step_count)
    except ValueError as error:
        raise LabelingError(str(error), field="evidence") from None
    key = {
        "trajectory_id": state.trajectory.pk,
        "annotator_id": state.user_id,
        "rubric_id": rubric.pk,
        "criterion": criterion,
    }
    with transaction.atomic(), history_context(action="rubric"):
        existing = RubricMark.objects.select_for_update().filter(**key).first()
        if mark == "":
            if existing is not None:
                existing.delete()
            return None
        new_mark = mark or (existing.mark if existing else "")
        if not new_mark:
            raise LabelingError(
                "Mark the criterion (met, not met or n/a) before linking its evidence.",
                field="mark",
            )
        links = list(existing.evidence) if existing else []
        if evidence is not None:
            links = evidence
        if toggle_step is not None:
            links = sorted(set(links) ^ {toggle_step})
        if existing is None:
            return RubricMark.objects.create(**key, mark=new_mark, evidence=links)
        if existing.mark != new_mark or list(existing.evidence) != links:
            existing.mark = new_mark
            existing.evidence = links
            existing.save(update_fields=["mark", "evidence", "updated_at"])
        return existing


def failure_modes(project: Project) -> list[str]:
    """The failure-mode taxonomy of the project's episode verdicts: the error tags of its
    active schemas, in schema order, each once."""
    modes: dict[str, None] = {}
    for tags in (
        LabelSchema.objects.filter(project=project, is_active=True)
        .order_by("id")
        .values_list("error_tags", flat=True)
    ):
        for tag in tags or []:
            if isinstance(tag, str) and tag:
                modes.setdefault(tag, None)
    return list(modes)


def episode_verdict_set(
    *,
    state: LabelingState,
    agent: str = "",
    outcome: str = "",
    failure_mode: str = "",
    critique: str = "",
) -> EpisodeVerdict | None:
    """Set this user's episode verdict on the trajectory (``agent`` empty) or on one of
    its agents. All answers empty takes the verdict away (returns None). Errors name the
    field: an agent not among the trajectory's, an outcome not offered, a failure mode
    outside the taxonomy."""
    require_can_label(state)
    agent = agent_name(agent) if agent.strip() else ""
    if agent:
        known = agent_steps(state.trajectory.pk)
        if agent not in known.agents:
            listed = ", ".join(known.agents) or "none"
            raise LabelingError(
                f"agent: {agent!r} is not one of this trajectory's agents ({listed})",
                field="agent",
            )
    if outcome and outcome not in EpisodeVerdict.Outcome.values:
        raise LabelingError(
            f"outcome: {outcome!r} is not one of {', '.join(EpisodeVerdict.Outcome.values)}",
            field="outcome",
        )
    if failure_mode:
        modes = failure_modes(state.project)
        if failure_mode not in modes:
            raise LabelingError(
                f"failure_mode: {failure_mode!r} is not in the project's taxonomy"
                f" ({', '.join(modes) or 'none: add error tags to a schema'})",
                field="failure_mode",
            )
    if len(critique) > MAX_CRITIQUE_CHARS:
        raise LabelingError(f"critique: at most {MAX_CRITIQUE_CHARS} characters", field="critique")
    key: dict[str, Any] = {
        "trajectory_id": state.trajectory.pk,
        "annotator_id": state.user_id,
        "agent": agent,
    }
    with transaction.atomic(), history_context(action="episode"):
        if not (outcome or failure_mode or critique.strip()):
            EpisodeVerdict.objects.filter(**key).delete()
            return None
        verdict, _ = EpisodeVerdict.objects.update_or_create(
            **key,
            defaults={
                "outcome": outcome,
                "failure_mode": failure_mode,
                "critique": critique.strip(),
            },
        )
    return verdict
