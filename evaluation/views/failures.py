"""Where failed rollouts go wrong: the failure overview, its list of failed rollouts,
and a rollout against another of its task (the rollout diff)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from evaluation import compare, failures
from evaluation import rollout_diff as rollout_diff_queries
from evaluation.forms import (
    FailureForm,
)
from evaluation.kept import summary_kept, summary_params
from evaluation.views.common import (
    base_context,
    compare_project,
    form_errors,
    page_links,
    query_url,
)
from stepscope.web import HtmxHttpRequest
from trajectories.models import Project, Trajectory
from trajectories.selectors import (
    STEP_PREVIEW_CHARS,
    can_manage_data,
    trajectory_get_for_user,
)


def _failure_form(
    request: HtmxHttpRequest, slug: str
) -> tuple[Project, FailureForm, dict[str, Any]]:
    """The project, its failure form bound to the request, and the page's context."""
    project = compare_project(request, slug)
    form = FailureForm(request.GET, project=project, options=compare.compare_options(project))
    return project, form, {**base_context(request, project), "form": form}


@login_required
@require_GET
def failure_overview(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project, form, context = _failure_form(request, slug)
    if form.is_valid():
        source = form.cleaned_data["source"]
        piece = form.cleaned_data["piece"]
        kept = summary_kept(project, "failures", summary_params("failures", request.GET))
        context["kept"] = kept
        overview = kept.value
        params = {
            "labels": compare.source_param(source),
            "threshold": f"{source.threshold:g}" if source.kind == "model" else "",
            "slice": str(piece) if piece else "",
        }
        context.update(
            overview=overview,
            groups=[
                (
                    title,
                    [
                        (
                            group,
                            query_url(
                                "failure-list",
                                project,
                                {**params, "grouping": grouping, "value": group.value},
                            ),
                        )
                        for group in overview.groups[grouping]
                    ],
                )
                for grouping, title in failures.GROUPINGS.items()
            ]
            if overview is not None
            else [],
            located_href=query_url("failure-list", project, params),
        )
    else:
        context["errors"] = form_errors(form)
    return render(request, "evaluation/failures.html", context)


@login_required
@require_GET
def failure_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project, form, context = _failure_form(request, slug)
    if not form.is_valid():
        context["errors"] = form_errors(form)
        return render(request, "evaluation/failure_list.html", context, status=400)
    grouping = form.cleaned_data.get("grouping") or ""
    value = form.cleaned_data.get("value") or ""
    try:
        rows, more = failures.failure_list_page(
            project,
            form.cleaned_data["source"],
            grouping=grouping,
            value=value,
            piece=form.cleaned_data["piece"],
            page=form.page_number,
        )
    except ValueError:
        context["errors"] = [f"{value!r} is not a group of {failures.GROUPINGS[grouping]}."]
        return render(request, "evaluation/failure_list.html", context, status=400)
    back_params = request.GET.copy()
    for name in ("grouping", "value", "page"):
        back_params.pop(name, None)
    context.update(
        rows=rows,
        source=form.cleaned_data["source"],
        group_name=failures.group_name(grouping, value),
        back=reverse("failure-overview", args=[project.slug]) + "?" + back_params.urlencode(),
        pages=page_links(request, form.page_number, more),
    )
    return render(request, "evaluation/failure_list.html", context)


# --- Rollout against rollout --------------------------------------------------------------


@login_required
@require_GET
def rollout_diff(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Debug a rollout: side by side with another rollout of the same task (by default a
    success sharing the longest prefix), aligned step by step, divergence marked."""
    trajectory = trajectory_get_for_user(request.user, pk)
    other_id = request.GET.get("with", "")
    if other_id.isdigit():
        other: Trajectory | None = trajectory_get_for_user(request.user, int(other_id))
        if other is not None and other.project_id != trajectory.project_id:
            raise Http404("Compare rollouts of one project.")
    else:
        other = rollout_diff_queries.diff_partner(trajectory)
    # Annotators may be labeling blind; only researchers and admins see everyone's labels.
    show_labels = can_manage_data(request.user, trajectory.project)
    context: dict[str, object] = {
        "project": trajectory.project,
        "trajectory": trajectory,
        "other": other,
        "rollouts": rollout_diff_queries.rollouts_of_task(trajectory),
        "show_labels": show_labels,
        "preview_chars": STEP_PREVIEW_CHARS,
    }
    if other is not None:
        left = rollout_diff_queries.diff_steps(trajectory, with_labels=show_labels)
        right = rollout_diff_queries.diff_steps(other, with_labels=show_labels)
        context |= rollout_diff_queries.diff_context(left, right)
    return render(request, "evaluation/rollout_diff.html", context)
