"""The decisive-failure panel of the trajectory page (key ``d``): which agent, at which
step, decided that the run failed. The page loads it after it is shown (the surface
keeps its constant queries); without JavaScript it is a page of its own."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from labeling import selectors, services
from labeling.forms import DecisiveForm
from labeling.selectors import LabelingState
from labeling.views.common import form_message, queue_param, refuse
from stepscope.web import HtmxHttpRequest


def _context(state: LabelingState, **extra: object) -> dict[str, object]:
    known = services.agent_steps(state.trajectory.pk)
    verdict = state.verdict
    return {
        "project": state.project,
        "trajectory": state.trajectory,
        "state": state,
        "queue_id": state.queue_id,
        "agents": known.agents,
        "multi_agent": known.multi_agent,
        "last_step": max(known.step_count - 1, 0),
        "decisive": verdict
        if verdict and (verdict.decisive_agent or verdict.decisive_step is not None)
        else None,
        "verdict": verdict,
        **extra,
    }


@login_required
@require_http_methods(["GET", "POST"])
def decisive_failure(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """GET: the panel (HTMX) or its page. POST: save the user's decisive failure, or
    clear it with neither agent nor step."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    url = reverse("decisive-failure", args=[pk])
    back = url + (f"?queue={state.queue_id}" if state.queue_id else "")
    if request.method == "POST":
        form = DecisiveForm(request.POST)
        if not form.is_valid():
            return refuse(request, services.LabelingError(form_message(form)), back=back)
        try:
            services.decisive_failure_set(
                state=state,
                agent=form.cleaned_data["agent"],
                step=form.cleaned_data["step"],
                reason=form.cleaned_data["reason"],
            )
        except services.LabelingError as error:
            return refuse(request, error, back=back)
        if not request.htmx:
            return HttpResponseRedirect(back)
        state = selectors.labeling_state_for_user(request.user, pk, queue_id=state.queue_id)
        return render(request, "labeling/_decisive.html", _context(state, saved=True))
    context = _context(state)
    if request.htmx:
        if not context["multi_agent"] and context["decisive"] is None:
            # One agent (a single-agent math rollout): nobody else to blame, no panel.
            return HttpResponse('<section class="decisive" id="decisive" hidden></section>')
        return render(request, "labeling/_decisive.html", context)
    return render(request, "labeling/decisive.html", context)
