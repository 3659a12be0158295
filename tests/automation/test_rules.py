"""Rules without a worker: what a rule acts on (its selection, its sampling, once per
trajectory), what it refuses, and its API and pages for the project's admins."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

from automation import services
from automation.models import ArrivalMissed, Rule, RuleFiring, WebhookDelivery
from exports.models import ExportJob
from labeling.models import Queue, QueueItem
from labeling.services import queue_create
from tests.factories import trajectory_with_steps
from trajectories.models import Project, Trajectory
from trajectories.selection import TrajectoryFilters, selection_parse

pytestmark = pytest.mark.django_db


def _trajectories(project: Project, count: int) -> list[Trajectory]:
    return [
        trajectory_with_steps(
            project, [f"step {n}.{i}" for i in range(2 + n % 3)], success=n % 2 == 0
        )
        for n in range(count)
    ]


def _queue(project: Project, owner: User) -> Queue:
    return queue_create(
        project=project,
        name="failures",
        created_by=owner,
        filters=selection_parse({"outcome": "success", "task": "none-such"}),
    )


def test_a_rule_acts_once_on_what_its_selection_and_sampling_keep(
    project: Project, owner: User
) -> None:
    trajectories = _trajectories(project, 40)
    queue = _queue(project, owner)
    assert queue.items.count() == 0
    rule = services.rule_create(
        project=project,
        name="half the failures",
        filters=selection_parse({"outcome": "failure"}),
        rate=0.5,
        action=Rule.Action.QUEUE,
        queue=queue,
        user=owner,
    )
    ids = [t.pk for t in trajectories]
    fired = services.rules_apply(project_id=project.pk, trajectory_ids=ids, source="push")
    failures = {t.pk for t in trajectories if not t.success}
    acted = set(RuleFiring.objects.filter(rule=rule).values_list("trajectory_id", flat=True))
    assert fired == len(acted) > 0
    assert acted < failures  # failures only, and a sample of them
    assert 4 <= len(acted) <= 16
    assert set(queue.items.values_list("trajectory_id", flat=True)) == acted
    # The same arrival again (a redelivered task), a backfill: nothing more.
    assert services.rules_apply(project_id=project.pk, trajectory_ids=ids) == 0
    assert services.rule_backfill(rule_id=rule.pk) == 0
    assert QueueItem.objects.filter(queue=queue).count() == len(acted)
    firing = RuleFiring.objects.filter(rule=rule).first()
    assert firing is not None
    assert firing.trigger == "arrival" and firing.source == "push"
    assert firing.result == {"queue": queue.pk, "queue_name": "failures", "added": len(acted)}


def test_a_backfill_acts_on_the_trajectories_already_there(project: Project, owner: User) -> None:
    trajectories = _trajectories(project, 6)
    queue = _queue(project, owner)
    rule = services.rule_create(
        project=project,
        name="long ones",
        filters=selection_parse({"min_steps": "3"}),
        action=Rule.Action.QUEUE,
        queue=queue,
        user=owner,
    )
    assert services.rule_backfill(rule_id=rule.pk) == sum(t.step_count >= 3 for t in trajectories)
    firings = RuleFiring.objects.filter(rule=rule)
    assert {f.trigger for f in firings} == {"backfill"}
    assert set(queue.items.values_list("trajectory_id", flat=True)) == {
        t.pk for t in trajectories if t.step_count >= 3
    }


def test_a_webhook_action_records_a_delivery_with_the_trajectories(
    project: Project, owner: User, allow_loopback: None
) -> None:
    trajectories = _trajectories(project, 3)
    webhook, _ = services.webhook_create(
        project=project, name="trainer", url="http://127.0.0.1:9/hook", events=[], user=owner
    )
    rule = services.rule_create(
        project=project,
        name="tell the trainer",
        filters=TrajectoryFilters(),
        action=Rule.Action.WEBHOOK,
        webhook=webhook,
        user=owner,
    )
    services.rules_apply(project_id=project.pk, trajectory_ids=[t.pk for t in trajectories])
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert delivery.kind == "rule.fired"
    assert delivery.payload["data"]["trajectories"] == sorted(t.pk for t in trajectories)
    assert delivery.payload["project"] == {"id": project.pk, "slug": project.slug}
    assert RuleFiring.objects.get(rule=rule, trajectory=trajectories[0]).result == {
        "webhook": webhook.pk,
        "delivery": delivery.message_id,
    }


def _api(user: User) -> Client:
    token = Token.objects.get_or_create(user=user)[0].key
    return Client(HTTP_AUTHORIZATION=f"Token {token}")


def _post(client: Client, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, json.dumps(body), content_type="application/json")


def test_the_api_makes_rules_and_refuses_unknown_filters_and_fields(
    project: Project, owner: User
) -> None:
    queue = _queue(project, owner)
    api = _api(owner)
    body = {
        "project": project.slug,
        "name": "to label",
        "selection": {"outcome": "failure", "min_steps": 2},
        "rate": 0.25,
        "action": "queue",
        "queue": queue.pk,
    }
    bad = _post(api, "/api/v1/rules/", {**body, "selection": {"outcome": "failure", "bogus": 1}})
    assert bad.status_code == 400
    assert "bogus" in bad.json()["selection"]
    assert "unknown filter" in bad.json()["selection"]["bogus"][0]
    assert _post(api, "/api/v1/rules/", {**body, "sampling": 1}).json() == {
        "sampling": ["Unknown field."]
    }
    no_queue = _post(api, "/api/v1/rules/", {key: v for key, v in body.items() if key != "queue"})
    assert no_queue.status_code == 400 and "queue" in no_queue.json()
    made = _post(api, "/api/v1/rules/", body)
    assert made.status_code == 201, made.json()
    rule = made.json()
    assert rule["selection"] == {"outcome": "failure", "min_steps": 2}
    assert rule["rate"] == 0.25 and rule["queue"] == queue.pk and rule["firings"] == 0
    again = _post(api, "/api/v1/rules/", body)
    assert again.status_code == 400 and "exists already" in again.json()["name"][0]
    listed = api.get(f"/api/v1/rules/?project={project.slug}").json()["results"]
    assert [r["id"] for r in listed] == [rule["id"]]
    off = _post(api, f"/api/v1/rules/{rule['id']}/active/", {"active": False})
    assert off.json()["active"] is False


def test_rules_are_the_admins(
    project: Project, owner: User, researcher: User, outsider: User
) -> None:
    rule = services.rule_create(
        project=project,
        name="r",
        filters=TrajectoryFilters(),
        action=Rule.Action.QUEUE,
        queue=_queue(project, owner),
        user=owner,
    )
    for user, listed, page in ((researcher, 0, 403), (outsider, 0, 404), (owner, 1, 200)):
        assert len(_api(user).get("/api/v1/rules/").json()["results"]) == listed
        client = Client()
        client.force_login(user)
        assert client.get(f"/p/{project.slug}/rules/").status_code == page
        assert client.get(f"/p/{project.slug}/rules/{rule.pk}/").status_code == page
    assert _api(outsider).get(f"/api/v1/rules/?project={project.slug}").status_code == 404


def test_the_rules_page_makes_a_rule_from_the_lists_query_string(
    project: Project, owner: User
) -> None:
    queue = _queue(project, owner)
    client = Client()
    client.force_login(owner)
    form = {
        "name": "failures to label",
        "selection": "outcome=failure&nosuch=1",
        "rate": "1",
        "action": "queue",
        "queue": str(queue.pk),
    }
    refused = client.post(f"/p/{project.slug}/rules/", form)
    assert refused.status_code == 400
    assert "nosuch: unknown filter" in refused.content.decode()
    assert not Rule.objects.exists()
    made = client.post(f"/p/{project.slug}/rules/", {**form, "selection": "?outcome=failure"})
    rule = Rule.objects.get()
    assert made.status_code == 302 and made["Location"] == f"/p/{project.slug}/rules/{rule.pk}/"
    assert rule.selection == {"outcome": "failure"} and rule.queue == queue
    page = client.get(made["Location"]).content.decode()
    assert "outcome=failure" in page and 'id="no-firings"' in page
    row = client.post(
        f"/p/{project.slug}/rules/{rule.pk}/active/", {"active": "0"}, HTTP_HX_REQUEST="true"
    )
    assert row.status_code == 200 and row.content.decode().lstrip().startswith("<tr")
    rule.refresh_from_db()
    assert rule.active is False


def test_an_export_rule_exports_its_selection(project: Project, owner: User) -> None:
    trajectories = _trajectories(project, 4)
    rule = services.rule_create(
        project=project,
        name="export failures",
        filters=selection_parse({"outcome": "failure"}),
        action=Rule.Action.EXPORT,
        export={"format": "sft", "labels": "human:majority", "neutral": "drop"},
        user=owner,
    )
    with pytest.raises(services.RuleError, match="Unknown export parameters bogus"):
        services.rule_create(
            project=project,
            name="bad",
            filters=TrajectoryFilters(),
            action=Rule.Action.EXPORT,
            export={"format": "sft", "labels": "human:majority", "neutral": "drop", "bogus": 1},
            user=owner,
        )
    services.rules_apply(project_id=project.pk, trajectory_ids=[t.pk for t in trajectories])
    job = ExportJob.objects.get()
    assert job.selection == {"outcome": "failure"}
    assert job.total == sum(not t.success for t in trajectories)
    assert RuleFiring.objects.filter(rule=rule).first().result == {"export": job.pk}  # type: ignore[union-attr]


def test_an_export_rule_exports_into_a_named_batch(project: Project, owner: User) -> None:
    """Each export the rule starts goes into its batch (the next version once it
    finishes); a name that cannot be a batch's is refused when the rule is made."""
    trajectories = _trajectories(project, 2)
    export = {"format": "sft", "labels": "human:majority", "neutral": "drop", "batch": "rl-new"}
    rule = services.rule_create(
        project=project,
        name="export into a batch",
        filters=TrajectoryFilters(),
        action=Rule.Action.EXPORT,
        export=export,
        user=owner,
    )
    with pytest.raises(services.RuleError, match="is not a batch name"):
        services.rule_create(
            project=project,
            name="bad batch",
            filters=TrajectoryFilters(),
            action=Rule.Action.EXPORT,
            export={**export, "batch": "rl new@1"},
            user=owner,
        )
    services.rules_apply(project_id=project.pk, trajectory_ids=[t.pk for t in trajectories])
    job = ExportJob.objects.get()
    assert job.batch is not None and job.batch.name == "rl-new"
    assert RuleFiring.objects.filter(rule=rule).first().result == {  # type: ignore[union-attr]
        "export": job.pk,
        "batch": "rl-new",
    }


def test_an_arrival_while_the_broker_is_down_is_acted_on_by_the_sweep(
    project: Project,
    owner: User,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The push is taken (201) though its rules cannot be queued; the arrival is kept,
    and the worker's periodic sweep fires the rule on it later: delayed, not lost."""
    from stepscope.celery import app

    queue = _queue(project, owner)
    rule = services.rule_create(
        project=project,
        name="every failure",
        filters=selection_parse({"outcome": "failure"}),
        rate=1.0,
        action=Rule.Action.QUEUE,
        queue=queue,
        user=owner,
    )
    # Nothing listens on port 9 here; new connection pools are made on first use.
    monkeypatch.setenv("CELERY_BROKER_WRITE_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setattr(app, "_pool", None)
    monkeypatch.setattr(app.amqp, "_producer_pool", None)
    token, _ = Token.objects.get_or_create(user=owner)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    records = [
        {
            "id": f"r{n}",
            "task": "t",
            "steps": [{"content": "s"}],
            "outcome": {"success": n % 2 == 0},
        }
        for n in range(6)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/api/v1/imports/",
            {"project": project.slug, "trajectories": records},
            content_type="application/json",
        )
    assert response.status_code == 201, response.content
    missed = ArrivalMissed.objects.get(project=project)
    failures = set(
        Trajectory.objects.filter(project=project, success=False).values_list("pk", flat=True)
    )
    assert len(failures) == 3
    # A push arrives as its batch (an import's trajectories are those it created).
    assert missed.import_batch_id == response.json()["id"] and missed.source == "push"
    assert not RuleFiring.objects.filter(rule=rule).exists()

    assert services.rules_sweep() == 3
    assert set(queue.items.values_list("trajectory_id", flat=True)) == failures
    assert not ArrivalMissed.objects.exists()
    firing = RuleFiring.objects.filter(rule=rule).first()
    assert firing is not None and firing.trigger == "arrival" and firing.source == "push"
    assert services.rules_sweep() == 0


def test_the_worker_sweeps_missed_arrivals() -> None:
    """The sweep is one of the beat's periodic tasks, under the task name it registers."""
    from django.conf import settings

    from automation import tasks

    entries = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert tasks.rules_sweep.name in entries
