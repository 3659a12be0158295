"""Named reads of the automation app. Rules and webhooks are their project admins'
(a webhook's URL and a rule's targets are the project's plumbing): every read starts
from the projects the user administers, so anything else is a 404."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet
from django.shortcuts import get_object_or_404

from automation.models import Rule, RuleFiring, Webhook, WebhookDelivery
from trajectories import selectors
from trajectories.models import Membership, Project

FIRINGS_SHOWN = 200
DELIVERIES_SHOWN = 200


def projects_administered(user: Any) -> QuerySet[Project]:
    if not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(memberships__user=user, memberships__role=Membership.Role.ADMIN)


def project_get_for_admin(user: Any, slug: str) -> Project:
    """The project, for its admins: outsiders get a 404, other members a 403."""
    return selectors.project_get_for_admin(user, slug, does="manage rules and webhooks")


def rules_for_project(project: Project) -> QuerySet[Rule]:
    return (
        Rule.objects.filter(project=project)
        .select_related("queue", "scorer", "webhook")
        .annotate(firing_count=Count("firings"))
        .order_by("name")
    )


def rule_get(project: Project, pk: int) -> Rule:
    return get_object_or_404(
        Rule.objects.select_related("project", "queue", "scorer", "webhook"),
        pk=pk,
        project=project,
    )


def rule_firings_recent(rule: Rule, limit: int = FIRINGS_SHOWN) -> QuerySet[RuleFiring]:
    return (
        RuleFiring.objects.filter(rule=rule)
        .select_related("trajectory")
        .only(
            "id",
            "trigger",
            "source",
            "result",
            "fired_at",
            "trajectory_id",
            "trajectory__external_id",
            "trajectory__project_id",
        )
        .order_by("-id")[:limit]
    )


def webhooks_for_project(project: Project) -> QuerySet[Webhook]:
    return Webhook.objects.filter(project=project).order_by("name")


def webhook_get(project: Project, pk: int) -> Webhook:
    return get_object_or_404(Webhook, pk=pk, project=project)


def webhook_deliveries_recent(
    webhook: Webhook, limit: int = DELIVERIES_SHOWN
) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(webhook=webhook).order_by("-id")[:limit]


def delivery_get(project: Project, pk: int) -> WebhookDelivery:
    return get_object_or_404(
        WebhookDelivery.objects.select_related("webhook"), pk=pk, webhook__project=project
    )
