"""Browse pages: the trajectory list, a step's full text, imports, a task's prefix tree.

Every view fetches through a ``*_for_user`` selector, so anything outside the user's
projects is a 404. HTMX requests get a template partial instead of the whole page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from stepscope.web import HtmxHttpRequest
from trajectories import prefix_tree, selectors, services
from trajectories.columns import ListColumn, trajectory_list_columns
from trajectories.forms import ImportUploadForm, TrajectoryFilterForm
from trajectories.models import ImportBatch
from trajectories.selection import (
    LIST_DEFAULT_ORIGIN,
    SelectionError,
    selection_refused_to_blind,
    selection_without,
)


@login_required
@require_GET
def trajectory_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_user(request.user, slug)
    query = request.GET.copy()
    query.setdefault("origin", LIST_DEFAULT_ORIGIN)
    form = TrajectoryFilterForm(query)
    role = selectors.membership_role(request.user, project)
    columns = trajectory_list_columns(project, role)
    filters = form.filters()
    try:
        selectors.selection_check(project, filters)
    except SelectionError as error:
        form.add_selection_error(error)
        filters = selection_without(filters, error.errors)
    # As the failures page: a filter on everyone's labels is not an annotator's where the
    # project hides them.
    blind = selection_refused_to_blind(
        filters, hidden=not selectors.role_downloads_exports(role, project)
    )
    if blind is not None:
        form.add_selection_error(blind)
        filters = selection_without(filters, blind.errors)
    # A filter that could not be read lists nothing: listing the rest beside its error
    # reads as if it had been applied.
    refused = bool(form.errors)
    try:
        ordering = selectors.list_ordering_parse(request.GET.get("ordering", ""), columns)
    except ValueError as error:
        form.add_error(None, f"ordering: {error}")
        ordering = selectors.list_ordering_parse("", columns)
    offset = request.GET.get("offset", "")
    rows, next_cursor = (
        ([], None)
        if refused
        else selectors.trajectory_list_page(
            project,
            filters,
            after=form.cursor(),
            offset=int(offset) if offset.isdigit() else 0,
            ordering=ordering,
            columns=columns,
        )
    )
    sorted_by_id = ordering.text == selectors.DEFAULT_ORDERING and not filters.ranked
    context = {
        "project": project,
        "form": form,
        "rows": rows,
        "next_after": next_cursor if sorted_by_id else None,
        "next_offset": None if sorted_by_id else next_cursor,
        "columns": columns,
        "refused": refused,
        "origin_default": "origin" not in request.GET
        and selectors.project_has_continuations(project),
    }
    if request.htmx:
        # "Load more": the next rows, appended to the table, and the button for the page
        # after them (swapped out of band).
        return render(request, "trajectories/trajectory_list.html#more-rows", context)
    context["model_names"] = selectors.model_names_for_project(project)
    for page in ("after", "offset"):
        query.pop(page, None)
    context["selection_query"] = query.urlencode()
    context["headers"] = _sort_headers(request, ordering, columns)
    return render(request, "trajectories/trajectory_list.html", context)


# The list's own columns, by the sort each header sets (selectors.LIST_SORTS).
_OWN_HEADERS = (
    ("external_id", "External id", False),
    ("task", "Task", False),
    ("model", "Model", False),
    ("steps", "Steps", True),
    ("outcome", "Outcome", False),
    ("reward", "Reward", True),
)


@dataclass(frozen=True)
class SortHeader:
    name: str
    header: str
    numeric: bool
    help: str
    sorts: bool
    aria_sort: str  # "ascending", "descending" or "" (not the sorted column)
    url: str  # the query that sorts by it (ascending first; again, descending)


def _sort_headers(
    request: HtmxHttpRequest, ordering: selectors.ListOrdering, columns: list[ListColumn]
) -> list[SortHeader]:
    """Each column header with its ``aria-sort`` and the link that sorts by it, back at
    the first page."""
    shown = [(name, header, numeric, "", True) for name, header, numeric in _OWN_HEADERS]
    shown += [(c.name, c.header, c.numeric, c.help, bool(c.sort)) for c in columns]
    headers = []
    for name, header, numeric, help, sorts in shown:
        active = name == ordering.name
        query = request.GET.copy()
        for page in ("after", "offset"):
            query.pop(page, None)
        query["ordering"] = f"-{name}" if active and not ordering.descending else name
        aria_sort = ("descending" if ordering.descending else "ascending") if active else ""
        headers.append(
            SortHeader(name, header, numeric, help, sorts, aria_sort, f"?{query.urlencode()}")
        )
    return headers


@login_required
@require_GET
def step_content(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    step = selectors.step_get_for_user(request.user, pk)
    context = {
        "project": step.trajectory.project,
        "trajectory": step.trajectory,
        "step": step,
        "text": step.content,
        "truncated": False,
    }
    if request.htmx:
        return render(request, "trajectories/step_content.html#step-content", context)
    return render(request, "trajectories/step_content.html", context)


@login_required
@require_GET
def trajectory_text(request: HtmxHttpRequest, pk: int, field: str) -> HttpResponse:
    """The whole task, ground truth or metadata of a trajectory, which its page shows in
    part; an unknown field is a 404."""
    trajectory = selectors.trajectory_get_for_user(request.user, pk)
    if field not in selectors.TRAJECTORY_TEXT_FIELDS:
        raise Http404(f"A trajectory has no text {field!r}.")
    text = selectors.trajectory_text_full(trajectory, field)
    context = {
        "project": trajectory.project,
        "trajectory": trajectory,
        "field": field,
        "title": field.replace("_", " ").capitalize(),
        "text": text,
        "length": len(text),
        "truncated": False,
    }
    if request.htmx:
        return render(request, "trajectories/_trajectory_text.html", context)
    return render(request, "trajectories/trajectory_text.html", context)


@login_required
def import_new(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_user(request.user, slug)
    if not selectors.can_manage_data(request.user, project):
        raise PermissionDenied("Only researchers and admins import data.")
    form = ImportUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            batch = services.import_upload_start(
                project=project,
                user=cast(User, request.user),  # login_required
                source_format=form.cleaned_data["source_format"],
                upload=form.cleaned_data["file"],
                skip_invalid=form.cleaned_data["skip_invalid"],
                mapping=form.cleaned_data["mapping_json"],
            )
        except ValueError as error:
            form.add_error(None, str(error))
        else:
            return redirect("import-detail", pk=batch.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request, "trajectories/import_new.html", {"project": project, "form": form}, status=status
    )


@login_required
@require_GET
def import_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _import_status(request, selectors.import_batch_get_for_user(request.user, pk))


@login_required
@require_POST
def import_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    batch = selectors.import_batch_get_for_user(request.user, pk)
    if not selectors.can_manage_data(request.user, batch.project):
        raise PermissionDenied("Only researchers and admins cancel imports.")
    batch = services.import_batch_cancel(batch=batch)
    if not request.htmx:
        return redirect("import-detail", pk=batch.pk)
    return _import_status(request, batch)


def _import_status(request: HtmxHttpRequest, batch: ImportBatch) -> HttpResponse:
    context = {
        "project": batch.project,
        "batch": batch,
        "can_manage": selectors.can_manage_data(request.user, batch.project),
    }
    if request.htmx:
        return render(request, "trajectories/import_detail.html#import-status", context)
    return render(request, "trajectories/import_detail.html", context)


@login_required
@require_GET
def task_tree(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """A task's rollouts merged where their steps are identical, with the Monte Carlo
    value (mean outcome, Beta-binomial interval) of every prefix."""
    project = selectors.project_get_for_user(request.user, slug)
    task_key = request.GET.get("task", "")
    rollouts = selectors.task_rollouts(project, task_key) if task_key else None
    rows = []
    if rollouts and rollouts.trajectories:
        for segment in prefix_tree.segments(rollouts.hashes, rollouts.outcomes):
            steps = rollouts.steps[segment.rollout]
            rows.append(
                {
                    "segment": segment,
                    "first": steps[segment.start_index],
                    "last": steps[segment.start_index + segment.length - 1],
                    "trajectory": rollouts.trajectories[segment.rollout],
                }
            )
    context = {"project": project, "task_key": task_key, "rollouts": rollouts, "rows": rows}
    return render(request, "trajectories/task_tree.html", context)
