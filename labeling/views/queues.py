"""Queues: the list (also lazily loaded into the project home), creating one, a queue's
page, "next item" (key ``n``), skipping and closing."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from labeling import selectors, services
from labeling.forms import QueueForm
from labeling.models import Queue, QueueAssignment
from labeling.views.common import refuse
from stepscope.web import HtmxHttpRequest, current_user
from trajectories.selection import SelectionError
from trajectories.selectors import membership_role, project_get_for_user


@login_required
@require_GET
def queue_list(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = project_get_for_user(request.user, slug)
    role = membership_role(request.user, project)
    context = {
        "project": project,
        "role": role,
        "reviewer": selectors.is_reviewer(role),
        "queues": selectors.queues_for_project(project, request.user, role),
    }
    if request.htmx:
        return render(request, "labeling/queue_list.html#queue-table", context)
    return render(request, "labeling/queue_list.html", context)


@login_required
@require_http_methods(["GET", "POST"])
def queue_create(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    project = project_get_for_user(request.user, slug)
    if not selectors.is_reviewer(membership_role(request.user, project)):
        raise PermissionDenied("Only researchers and admins create queues.")
    initial = {"overlap": selectors.LabelingSettings.of(project).labels_per_step}
    form = QueueForm(request.POST or None, project=project, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            queue = services.queue_create(
                project=project,
                name=data["name"],
                description=data["description"],
                created_by=current_user(request),
                filters=form.filters(),
                overlap=data["overlap"],
                lease_seconds=data["lease_minutes"] * 60,
                assignees=list(data["assignees"]),
                limit=data["limit"],
                order=data["order"] or Queue.Order.POSITION,
                schemas=list(data["schemas"]),
                span_schemas=list(data["span_schemas"]),
            )
        except services.LabelingError as error:
            form.add_error(None, error.message)
        except SelectionError as error:
            form.add_selection_error(error)
        else:
            messages.success(
                request, f"Queue {queue.name!r} created with {queue.items.count()} items."
            )
            return HttpResponseRedirect(reverse("queue-detail", args=[queue.pk]))
    return render(request, "labeling/queue_form.html", {"project": project, "form": form})


@login_required
@require_GET
def queue_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    queue, role = selectors.queue_get_for_user(request.user, pk)
    reviewer = selectors.is_reviewer(role)
    after = request.GET.get("after", "")
    items, next_after = (
        selectors.queue_items_page(queue, after=int(after) if after.isdigit() else None)
        if reviewer
        else ([], None)
    )
    context = {
        "project": queue.project,
        "queue": queue,
        "role": role,
        "reviewer": reviewer,
        "progress": selectors.queue_progress(queue, request.user),
        "span_progress": selectors.queue_span_progress(queue, request.user),
        "open_lease": QueueAssignment.objects.filter(
            item__queue=queue, annotator_id=request.user.pk, status=QueueAssignment.Status.LEASED
        )
        .select_related("item")
        .first(),
        "annotators": selectors.queue_annotators(queue) if reviewer else [],
        "items": items,
        "next_after": next_after,
    }
    if request.htmx and after:
        return render(request, "labeling/queue_detail.html#item-rows", context)
    return render(request, "labeling/queue_detail.html", context)


@login_required
@require_POST
def queue_next(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Lease the next item and open it. Pressed on an item that is not submitted yet, it
    says so rather than leaving the annotator's work behind."""
    queue, _ = selectors.queue_get_for_user(request.user, pk)
    here = request.POST.get("from", "")
    back = reverse("queue-detail", args=[queue.pk])
    if here.isdigit():
        back = reverse("trajectory-detail", args=[int(here)]) + f"?queue={queue.pk}"
    try:
        assignment = services.queue_item_take(queue=queue, annotator=current_user(request))
    except services.LabelingError as error:
        return refuse(request, error, back=back)
    if assignment is None:
        messages.info(request, f"Nothing left for you in {queue.name}. Thank you!")
        url = reverse("queue-detail", args=[queue.pk])
    else:
        trajectory_id = assignment.item.trajectory_id
        if here.isdigit() and int(here) == trajectory_id:
            return refuse(
                request,
                services.LabelingError("Submit this trajectory first (s), or skip it.", status=409),
                back=back,
            )
        url = reverse("trajectory-detail", args=[trajectory_id]) + f"?queue={queue.pk}"
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = url
        return response
    return HttpResponseRedirect(url)


@login_required
@require_POST
def queue_skip(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    queue, _ = selectors.queue_get_for_user(request.user, pk)
    released = services.queue_assignment_release(queue=queue, annotator=current_user(request))
    if released:
        messages.info(request, "Skipped. Your labels on it are kept; it will not come back to you.")
    return HttpResponseRedirect(reverse("queue-detail", args=[queue.pk]))


@login_required
@require_POST
def queue_active(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    queue, role = selectors.queue_get_for_user(request.user, pk)
    if not selectors.is_reviewer(role):
        raise PermissionDenied("Only researchers and admins open or close queues.")
    services.queue_set_active(queue=queue, active=request.POST.get("active") == "1")
    return HttpResponseRedirect(reverse("queue-detail", args=[queue.pk]))
