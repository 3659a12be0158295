"""Adjudication: researchers and admins compare the annotators' labels step by step, see
where they disagree, and set the final label (its own label source)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from labeling import selectors, services
from labeling.views.common import refuse, trigger
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.selectors import (
    STEP_PREVIEW_CHARS,
    membership_role,
    step_get_for_user,
    trajectory_get_for_user,
)


def _require_reviewer(role: str | None) -> None:
    if not selectors.is_reviewer(role):
        raise PermissionDenied("Only researchers and admins review labels.")


@login_required
@require_GET
def review_trajectory(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    trajectory = trajectory_get_for_user(request.user, pk)
    _require_reviewer(membership_role(request.user, trajectory.project))
    schema = selectors.active_schema(trajectory.project)
    table = selectors.review_table(trajectory, schema) if schema else None
    # The filter: which rows (``show``) and, optionally, one error tag.
    show = request.GET.get("show", "all")
    if show not in selectors.REVIEW_SHOWS:
        show = "all"
    tag = request.GET.get("tag", "")
    if table is None or tag not in table.tags:
        tag = ""
    context = {
        "project": trajectory.project,
        "trajectory": trajectory,
        "schema": schema,
        "table": table,
        "rows": table.filtered(show, tag) if table else [],
        "show": show,
        "shows": selectors.REVIEW_SHOWS,
        "tag": tag,
        "preview_chars": STEP_PREVIEW_CHARS,
    }
    return render(request, "labeling/review_trajectory.html", context)


@login_required
@require_POST
def final_label(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step = step_get_for_user(request.user, pk)
    project = step.trajectory.project
    _require_reviewer(membership_role(request.user, project))
    back = reverse("review-trajectory", args=[step.trajectory_id]) + f"#review-{step.pk}"
    schema = selectors.active_schema(project)
    raw = request.POST.get("value", "")
    if schema is None or not (raw == "" or raw.lstrip("-").isdigit()):
        return refuse(request, services.LabelingError("Give a value of the schema."), back=back)
    schema_id = request.POST.get("schema", "")
    if schema_id.isdigit() and int(schema_id) != schema.pk:
        error = services.StaleSchema("The label schema changed; reload the page.")
        return refuse(request, error, back=back)
    try:
        services.final_label_set(
            step=step,
            schema=schema,
            adjudicator=current_user(request),
            value=int(raw) if raw else None,
            rationale=request.POST.get("rationale", "")[: services.MAX_RATIONALE_CHARS],
        )
    except services.LabelingError as error:
        return refuse(request, error, back=back)
    if not request.htmx:
        return HttpResponseRedirect(back)
    table = selectors.review_table(step.trajectory, schema)
    row = next(r for r in table.rows if r.step.pk == step.pk)
    context = {
        "project": project,
        "schema": schema,
        "table": table,
        "row": row,
        "preview_chars": STEP_PREVIEW_CHARS,
    }
    response = render(request, "labeling/review_trajectory.html#review-row", context)
    # The keys move on to the next step, as while labelling.
    return trigger(response, "stepscope:finalised", {"step": step.pk})
