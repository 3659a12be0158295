"""Rubrics and episode verdicts on the pages (issue #36).

- ``p/<slug>/rubric/``: the project's rubrics; every member reads them, admins save a new
  version (a row per criterion: text, weight, condition).
- ``t/<pk>/rubric/``: the rubric panel of the trajectory page (keys ``b`` next criterion,
  ``m`` cycles its mark, ``e`` links the current step as evidence, Alt+click on a step
  does too). The page loads it after it is shown; without JavaScript it is a page.
- ``t/<pk>/episode/``: the episode-verdict panel (key ``v``): outcome, failure mode,
  critique, for the episode and, in a multi-agent run, per agent.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from labeling import selectors
from labeling.models import EpisodeVerdict
from labeling.rubrics import MARK_NAMES, MARKS
from labeling.selectors import LabelingState
from labeling.selectors.rubrics import (
    episode_verdicts,
    rubric_judge_marks_add,
    rubric_results,
    rubrics_active,
)
from labeling.services import LabelingError, agent_steps
from labeling.services.rubrics import (
    episode_verdict_set,
    failure_modes,
    rubric_mark_set,
    rubric_save,
)
from labeling.views.common import queue_param, refuse
from stepscope.web import HtmxHttpRequest
from trajectories.models import Membership
from trajectories.selectors import membership_role, project_get_for_admin, project_get_for_user

# Blank rows the rubric page offers under the criteria, for new ones.
BLANK_CRITERIA = 3


def _int(raw: str | None, name: str) -> int | None:
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise LabelingError(f"{name}: {raw!r} is not a whole number", field=name) from None


def _back(name: str, pk: int, state: LabelingState) -> str:
    url = reverse(name, args=[pk])
    return url + (f"?queue={state.queue_id}" if state.queue_id else "")


# --- The rubric page ----------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
def rubric_edit(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    if request.method == "POST":
        project = project_get_for_admin(request.user, slug, does="edit the rubric")
    else:
        project = project_get_for_user(request.user, slug)
    is_admin = membership_role(request.user, project) == Membership.Role.ADMIN
    here = reverse("rubric-edit", args=[project.slug])
    if request.method == "POST":
        texts = request.POST.getlist("text")
        weights = request.POST.getlist("weight")
        conditions = request.POST.getlist("condition")
        criteria: list[dict[str, Any]] = []
        for position, text in enumerate(texts):
            if not text.strip():
                continue
            weight = weights[position] if position < len(weights) else ""
            condition = conditions[position] if position < len(conditions) else ""
            criteria.append({"text": text, "weight": weight or 1, "condition": condition})
        try:
            rubric = rubric_save(
                project=project,
                user_id=request.user.pk,
                name=request.POST.get("name", "rubric"),
                criteria=criteria,
            )
        except LabelingError as error:
            messages.error(request, error.message)
        else:
            messages.success(request, f"Saved {rubric.name} v{rubric.version}.")
        return HttpResponseRedirect(here)
    rubrics = rubrics_active(project)
    editing = rubrics[0] if rubrics else None
    rows = list(editing.criteria) if editing else []
    rows += [{"text": "", "weight": "", "condition": ""}] * BLANK_CRITERIA
    return render(
        request,
        "labeling/rubric_edit.html",
        {
            "project": project,
            "rubrics": rubrics,
            "editing": editing,
            "rows": rows,
            "is_admin": is_admin,
        },
    )


# --- The rubric panel -------------------------------------------------------------------


def _rubric_context(state: LabelingState, **extra: object) -> dict[str, object]:
    results = rubric_results(state)
    rubric_judge_marks_add(state, results)
    return {
        "project": state.project,
        "trajectory": state.trajectory,
        "state": state,
        "queue_id": state.queue_id,
        "mine": [r for r in results if r.own],
        "others": [r for r in results if not r.own],
        "marks": [(m, MARK_NAMES[m]) for m in MARKS],
        **extra,
    }


@login_required
@require_http_methods(["GET", "POST"])
def rubric_panel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the panel (HTMX) or its page. POST: mark one criterion (``rubric``,
    ``criterion``, and ``mark`` and/or ``toggle_step``)."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    back = _back("rubric-panel", pk, state)
    if request.method == "POST":
        try:
            rubric_id = _int(request.POST.get("rubric"), "rubric")
            criterion = _int(request.POST.get("criterion"), "criterion")
            if rubric_id is None or criterion is None:
                raise LabelingError("Name the rubric and the criterion.", field="criterion")
            mark = request.POST.get("mark")
            rubric_mark_set(
                state=state,
                rubric_id=rubric_id,
                criterion=criterion,
                mark=mark if mark is not None else None,
                toggle_step=_int(request.POST.get("toggle_step"), "toggle_step"),
            )
        except LabelingError as error:
            return refuse(request, error, back=back)
        if not request.htmx:
            return HttpResponseRedirect(back)
        return render(request, "labeling/_rubric.html", _rubric_context(state, saved=True))
    context = _rubric_context(state)
    if request.htmx:
        if not context["mine"] and not context["others"]:
            return HttpResponse('<section class="rubric" id="rubric" hidden></section>')
        return render(request, "labeling/_rubric.html", context)
    return render(request, "labeling/rubric.html", context)


# --- The episode-verdict panel ------------------------------------------------------------


def _episode_context(state: LabelingState, **extra: object) -> dict[str, object]:
    known = agent_steps(state.trajectory.pk)
    verdicts = episode_verdicts(state)
    mine = {v.agent: v for v in verdicts if v.annotator_id == state.user_id}
    targets = [("", "the episode")]
    if known.multi_agent:
        targets += [(agent, agent) for agent in known.agents]
    return {
        "project": state.project,
        "trajectory": state.trajectory,
        "state": state,
        "queue_id": state.queue_id,
        "targets": [(agent, label, mine.get(agent)) for agent, label in targets],
        "others": [v for v in verdicts if v.annotator_id != state.user_id],
        "outcomes": EpisodeVerdict.Outcome.values,
        "failure_modes": failure_modes(state.project),
        **extra,
    }


@login_required
@require_http_methods(["GET", "POST"])
def episode_panel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the panel (HTMX) or its page. POST: save the user's verdict on the episode
    (``agent`` empty) or one agent; every answer empty clears it."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    back = _back("episode-panel", pk, state)
    if request.method == "POST":
        try:
            episode_verdict_set(
                state=state,
                agent=request.POST.get("agent", ""),
                outcome=request.POST.get("outcome", ""),
                failure_mode=request.POST.get("failure_mode", ""),
                critique=request.POST.get("critique", ""),
            )
        except LabelingError as error:
            return refuse(request, error, back=back)
        if not request.htmx:
            return HttpResponseRedirect(back)
        agent = request.POST.get("agent", "")
        return render(
            request, "labeling/_episode.html", _episode_context(state, saved=agent or "episode")
        )
    context = _episode_context(state)
    if request.htmx:
        return render(request, "labeling/_episode.html", context)
    return render(request, "labeling/episode.html", context)
