"""Notes to taxonomy on the failure-modes page: grouping the annotators' notes (a note
run, researchers and admins), a group made an error tag of a label schema (admins, who
edit schemas), and the note runs' rows with Cancel (the job base's)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from discovery import mode_selectors, note_services
from evaluation.views.common import compare_project
from labeling.models import LabelSchema
from labeling.services import LabelingError
from stepscope.jobs.views import JobRows
from stepscope.queueing import QueueUnavailable
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.models import Membership, Project
from trajectories.selectors import can_manage_data, membership_role


def _notes(project: Project) -> str:
    return reverse("failure-modes", args=[project.slug]) + "#notes"


def notes_context(request: HtmxHttpRequest, project: Project) -> dict[str, Any]:
    """What the failure-modes page shows of the notes: the latest finished note run's
    groups with example notes, the recent runs, and what an admin may tag into."""
    run = mode_selectors.note_run_latest(project)
    is_admin = membership_role(request.user, project) == Membership.Role.ADMIN
    return {
        "note_run": run,
        "note_groups": mode_selectors.note_groups_shown(run) if run is not None else [],
        "note_runs": list(mode_selectors.note_runs(project)[: mode_selectors.RUNS_SHOWN]),
        "note_count": note_services.notes_count(project) if run is None else run.total,
        "can_tag": is_admin,
        "tag_schemas": (
            list(LabelSchema.objects.filter(project=project, is_active=True).order_by("name"))
            if is_admin
            else []
        ),
    }


@login_required
@require_POST
def notes_start(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = compare_project(request, slug)
    if not can_manage_data(request.user, project):
        raise PermissionDenied("Only researchers and admins group notes.")
    try:
        run = note_services.note_run_start(project=project, user=current_user(request))
    except QueueUnavailable as error:
        messages.error(request, str(error))
        return HttpResponseRedirect(_notes(project))
    messages.success(request, f"Note run #{run.pk} queued.")
    return HttpResponseRedirect(_notes(project))


@login_required
@require_POST
def note_group_tag(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A group becomes an error tag of the chosen schema: a new schema version."""
    group = mode_selectors.note_group_get_for_user(request.user, pk)
    project = compare_project(request, group.run.project.slug)
    if membership_role(request.user, project) != Membership.Role.ADMIN:
        raise PermissionDenied("Only project admins edit the label schema.")
    unknown = sorted(set(request.POST) - {"tag", "schema", "csrfmiddlewaretoken"})
    name = request.POST.get("schema", "").strip()
    schema = LabelSchema.objects.filter(project=project, name=name, is_active=True).first()
    if unknown:
        messages.error(request, f"Unknown parameters: {', '.join(unknown)}")
    elif schema is None:
        messages.error(request, f"schema: no active label schema {name!r} in this project")
    else:
        try:
            saved = note_services.note_group_tag(
                group=group, schema=schema, tag=request.POST.get("tag", "")
            )
        except LabelingError as error:
            messages.error(request, f"{error.field or 'tag'}: {error.message}")
        else:
            messages.success(
                request,
                f"{saved.name} v{saved.version} has the error tag {group.tag!r}.",
            )
    return HttpResponseRedirect(_notes(project))


_note_rows = JobRows(
    get_for_user=mode_selectors.note_run_get_for_user,
    can_manage=can_manage_data,
    cancel=lambda run: note_services.note_run_cancel(run=run),
    template="discovery/_note_run_row.html",
    page="failure-modes",
)
note_run_row = _note_rows.row_view()
note_run_cancel = _note_rows.cancel_view()
