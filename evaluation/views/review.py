"""The review list: the trajectories two or more annotators labelled, the most
disagreements first (the adjudication pages themselves are labeling's). Finding them is a
pass over every label of the project's schema (6 s at a million steps), so the list is a
kept summary (``evaluation.kept``): made in the request for a small project, by a worker
for a large one while the page shows the kept list with its age."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from evaluation.kept import summary_kept
from labeling.selectors import active_schema, is_reviewer
from stepscope.web import HtmxHttpRequest
from trajectories.selectors import membership_role, project_get_for_user


@login_required
@require_GET
def review_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = project_get_for_user(request.user, slug)
    if not is_reviewer(membership_role(request.user, project)):
        raise PermissionDenied("Only researchers and admins review labels.")
    schema = active_schema(project)
    kept = summary_kept(project, "review", {"schema": str(schema.pk)}) if schema else None
    context = {
        "project": project,
        "schema": schema,
        "kept": kept,
        "candidates": (kept.value if kept else None) or [],
    }
    return render(request, "labeling/review_list.html", context)
