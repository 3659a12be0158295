"""The rules and webhooks pages (``/p/<slug>/rules/``, ``/p/<slug>/webhooks/``): the
project admins'. Outsiders get a 404, other members a 403 (``selectors``)."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automation import selectors, services
from automation.forms import RuleForm, WebhookForm
from stepscope.events import EVENT_KINDS
from stepscope.queueing import QueueUnavailable
from trajectories.models import Project
from trajectories.selection import SelectionError, selection_parse, selection_query


def _rules_page(
    request: HttpRequest, project: Project, form: RuleForm | None = None, status: int = 200
) -> HttpResponse:
    context = {
        "project": project,
        "form": form or RuleForm(project=project),
        "rules": selectors.rules_for_project(project),
    }
    return render(request, "automation/rules.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def rule_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug)
    if request.method != "POST":
        return _rules_page(request, project)
    form = RuleForm(request.POST, project=project)
    if not form.is_valid():
        return _rules_page(request, project, form, status=400)
    data = form.cleaned_data
    try:
        rule = services.rule_create(
            project=project,
            name=data["name"],
            filters=data["selection"],
            rate=data["rate"],
            action=data["action"],
            queue=data["queue"],
            scorer=data["scorer"],
            webhook=data["webhook"],
            export=data["export"],
            user=cast(User, request.user),
        )
    except SelectionError as error:
        form.add_error("selection", str(error))
        return _rules_page(request, project, form, status=400)
    except services.RuleError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
        return _rules_page(request, project, form, status=400)
    messages.success(
        request, f"Rule {rule.name} acts on trajectories as they arrive; backfill it for the rest."
    )
    return redirect("rule-detail", slug=project.slug, pk=rule.pk)


@login_required
@require_GET
def rule_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug)
    rule = selectors.rule_get(project, pk)
    query = selection_query(selection_parse(rule.selection))
    list_url = reverse("trajectory-list", args=[project.slug])
    context = {
        "project": project,
        "rule": rule,
        "firings": selectors.rule_firings_recent(rule),
        "firing_count": rule.firings.count(),
        "list_url": f"{list_url}?{'&'.join(f'{k}={v}' for k, v in query.items())}",
    }
    return render(request, "automation/rule_detail.html", context)


@login_required
@require_POST
def rule_active(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Turn a rule on or off; HTMX gets its row back, a plain form the rules page."""
    project = selectors.project_get_for_admin(request.user, slug)
    rule = selectors.rule_get(project, pk)
    services.rule_set_active(rule=rule, active=request.POST.get("active") == "1")
    if getattr(request, "htmx", False):
        row = selectors.rules_for_project(project).get(pk=rule.pk)
        context = {"project": project, "rule": row}
        return render(request, "automation/rules.html#rule-row", context)
    return redirect("rule-list", slug=project.slug)


@login_required
@require_POST
def rule_backfill(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug)
    rule = selectors.rule_get(project, pk)
    try:
        services.rule_backfill_start(rule=rule)
    except QueueUnavailable as error:
        messages.error(request, str(error))
    else:
        messages.success(
            request,
            f"Backfilling {rule.name}: it acts on the trajectories it selects that it"
            " has not acted on yet.",
        )
    return redirect("rule-detail", slug=project.slug, pk=rule.pk)


def _webhooks_page(
    request: HttpRequest,
    project: Project,
    form: WebhookForm | None = None,
    status: int = 200,
    created: tuple[object, str] | None = None,
) -> HttpResponse:
    context = {
        "project": project,
        "form": form or WebhookForm(),
        "webhooks": selectors.webhooks_for_project(project),
        "event_kinds": EVENT_KINDS,
        "created": created,
    }
    return render(request, "automation/webhooks.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def webhook_list(request: HttpRequest, slug: str) -> HttpResponse:
    """The webhooks; a POST makes one and shows its secret, this once (not redirected,
    so the secret is in no URL and no later page)."""
    project = selectors.project_get_for_admin(request.user, slug)
    if request.method != "POST":
        return _webhooks_page(request, project)
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _webhooks_page(request, project, form, status=400)
    try:
        webhook, secret = services.webhook_create(
            project=project, user=cast(User, request.user), **form.cleaned_data
        )
    except services.WebhookError as error:
        form.add_error(error.field if error.field in form.fields else None, error.message)
        return _webhooks_page(request, project, form, status=400)
    return _webhooks_page(request, project, created=(webhook, secret))


@login_required
@require_GET
def webhook_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug)
    webhook = selectors.webhook_get(project, pk)
    context = {
        "project": project,
        "webhook": webhook,
        "deliveries": selectors.webhook_deliveries_recent(webhook),
    }
    return render(request, "automation/webhook_detail.html", context)


@login_required
@require_POST
def webhook_active(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Switch a webhook off (it receives nothing; its pending deliveries wait) or on."""
    project = selectors.project_get_for_admin(request.user, slug)
    webhook = selectors.webhook_get(project, pk)
    active = request.POST.get("active") == "1"
    services.webhook_set_active(webhook=webhook, active=active)
    messages.success(
        request,
        f"{webhook.name} is on: deliveries that waited are being sent."
        if active
        else f"{webhook.name} is off: it receives nothing until it is switched on.",
    )
    return redirect("webhook-detail", slug=project.slug, pk=webhook.pk)


@login_required
@require_POST
def webhook_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """Delete a webhook and its deliveries, once its name is typed to confirm; refused
    while a rule calls it."""
    project = selectors.project_get_for_admin(request.user, slug)
    webhook = selectors.webhook_get(project, pk)
    if request.POST.get("confirm", "") != webhook.name:
        messages.error(request, "Type the webhook's name to delete it.")
        return redirect("webhook-detail", slug=project.slug, pk=webhook.pk)
    try:
        services.webhook_delete(webhook=webhook)
    except services.WebhookError as error:
        messages.error(request, error.message)
        return redirect("webhook-detail", slug=project.slug, pk=webhook.pk)
    messages.success(request, f"Deleted the webhook {webhook.name} and its deliveries.")
    return redirect("webhook-list", slug=project.slug)


@login_required
@require_POST
def delivery_redeliver(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = selectors.project_get_for_admin(request.user, slug)
    delivery = selectors.delivery_get(project, pk)
    try:
        services.webhook_redeliver(delivery=delivery)
    except (QueueUnavailable, services.WebhookError) as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Sending {delivery.message_id} again.")
    return redirect("webhook-detail", slug=project.slug, pk=delivery.webhook_id)
