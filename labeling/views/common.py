"""What the labeling views share: the request type, the queue parameter, the context of
the labeling surface, and how a refused request is answered (a 4xx with a message the
page shows, or a redirect with a flash message for a plain form post)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.forms import Form
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render

from labeling import selectors
from labeling.selectors import LabelingState
from labeling.services import LabelingError
from stepscope.web import HtmxHttpRequest
from trajectories.selectors import STEP_PREVIEW_CHARS, live_trace_state


def form_message(form: Form) -> str:
    return "; ".join(
        f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items()
    )


def queue_param(request: HttpRequest) -> int | None:
    raw = request.POST.get("queue") or request.GET.get("queue") or ""
    return int(raw) if raw.isdigit() else None


def surface_context(state: LabelingState, *, start: int = 0) -> dict[str, Any]:
    """Everything the labeling surface templates read: the state, one page of steps, and
    the cursor of the next page."""
    steps, next_start = selectors.step_rows(state, start=start)
    return {
        "project": state.project,
        "trajectory": state.trajectory,
        "state": state,
        "schema": state.schema,
        "steps": steps,
        "next_start": next_start,
        # A page that does not start at step 0 links back to the page before it.
        "previous_start": max(start - selectors.STEPS_PAGE_SIZE, 0) if start > 0 else None,
        "steps_page_size": selectors.STEPS_PAGE_SIZE,
        "preview_chars": STEP_PREVIEW_CHARS,
        "queue_id": state.queue_id,
    }


def labeling_surface(request: HttpRequest, pk: int) -> dict[str, Any]:
    """The context of the trajectory page; 404 outside the user's projects."""
    state = selectors.labeling_state_for_user(request.user, pk, queue_id=queue_param(request))
    context = surface_context(state)
    # A trace still arriving over OTLP is marked on the page ("receiving"); only OTel
    # trajectories can have arrived so, and only they cost the query.
    if context["trajectory"].source_format == "otel":
        context["live_state"] = live_trace_state(pk)
    return context


def refuse(
    request: HtmxHttpRequest,
    error: LabelingError,
    *,
    back: str,
    template: str = "labeling/_flash.html",
    target: str = "#flash",
) -> HttpResponse:
    """Answer a refused write: HTMX gets the status and a message swapped into the page's
    flash area (or into ``target``, a message box beside the control that was used, drawn
    by ``template``); a plain form post is redirected back with the message."""
    if request.htmx:
        response = render(request, template, {"message": error.message}, status=error.status)
        response["HX-Retarget"] = target
        response["HX-Reswap"] = "outerHTML"
        return response
    messages.error(request, error.message)
    return HttpResponseRedirect(back)


def trigger(response: HttpResponse, event: str, detail: dict[str, Any]) -> HttpResponse:
    """Tell the page's script what happened, once the new content is in place
    (``HX-Trigger-After-Settle``), e.g. which step to move to."""
    response["HX-Trigger-After-Settle"] = json.dumps({event: detail})
    return response
