"""Policies from the project's pages, in a real browser: a project without one says how
to add one (not a command that makes a policy other projects may not use), a researcher
adds one in the rollouts section, and only then does the trajectory page offer "roll out
from here". Other projects' policies stay out of ``/policies/?project=`` and out of the
export form's label sources."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from rollouts import demo_policy
from rollouts.models import DemoPolicyTraining, Policy, StepMC
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.screens import UNLABELLED, shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


@pytest.mark.parametrize("viewport", [(1440, 900), (390, 844)])
def test_a_researcher_adds_a_policy_and_then_may_roll_out(
    page: Any, live_server: Any, viewport: tuple[int, int]
) -> None:
    project = project_create(slug="plain", name="Plain")
    trajectory = trajectory_with_steps(project, ["2 + 2 = 4.", "So 4."])
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    # The demo project's policy is global but for demo projects only.
    Policy.objects.create(name=demo_policy.POLICY_NAME, model_ref="demo")
    width, height = viewport
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "lead", PASSWORD)

    detail = live_server.url + reverse("trajectory-detail", args=[trajectory.pk])
    page.goto(detail)
    page.wait_for_selector("li.step")
    assert page.locator(".step-rollouts-open").count() == 0

    page.goto(live_server.url + reverse("rollouts-section", args=[project.slug]))
    hint = page.inner_text("#no-policy-hint")
    assert "train_demo_policy" not in hint and "admin" not in hint
    assert page.locator("#policy-add[open]").count() == 1
    # A bad value is refused, naming the field.
    page.fill("#id_new-policy-name", "tiny")
    page.fill("#id_new-policy-model_ref", "org/tiny-lm")
    page.fill("#id_new-policy-parameters", "[1]")
    page.click("#policy-add button[type=submit]")
    page.wait_for_selector("#policy-add .errors")
    assert "Give a JSON object." in page.inner_text("#policy-add")
    assert not Policy.objects.filter(project=project).exists()
    page.fill("#id_new-policy-parameters", '{"max_new_tokens": 64}')
    page.click("#policy-add button[type=submit]")
    page.wait_for_selector("#id_policy")
    policy = Policy.objects.get(project=project)
    assert (policy.name, policy.model_ref, policy.parameters) == (
        "tiny",
        "org/tiny-lm",
        {"max_new_tokens": 64},
    )
    assert page.eval_on_selector_all("#id_policy option", "o => o.map(x => x.textContent)") == [
        "tiny"
    ]
    assert page.evaluate(UNLABELLED) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    shot(page, f"policy-added-{width}")

    page.goto(detail)
    page.wait_for_selector(".step-rollouts-open")


def test_other_projects_policies_are_not_offered(client: Any) -> None:
    project = project_create(slug="plain", name="Plain")
    demo = project_create(slug="demo", name="Demo")
    DemoPolicyTraining.objects.create(project=demo, rollout_tasks=0, status="done")
    global_demo = Policy.objects.create(name=demo_policy.POLICY_NAME, model_ref="demo")
    own = Policy.objects.create(name="own", model_ref="x", project=project)
    valued = trajectory_with_steps(demo, ["1 + 1 = 2."])
    StepMC.objects.create(
        step=valued.steps.get(), policy=global_demo, k=4, successes=4, soft=1.0, hard=True
    )
    user = UserFactory.create(username="lead")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.ADMIN)
    MembershipFactory.create(user=user, project=demo, role=Membership.Role.ADMIN)

    api = APIClient()
    api.force_authenticate(user)
    listed = api.get("/api/v1/policies/", {"project": project.slug}).json()["results"]
    assert [p["id"] for p in listed] == [own.pk]
    listed = api.get("/api/v1/policies/", {"project": demo.slug}).json()["results"]
    assert [p["id"] for p in listed] == [global_demo.pk]

    client.force_login(user)
    plain_form = client.get(reverse("export-list", args=[project.slug])).content.decode()
    assert "Monte Carlo of" not in plain_form
    demo_form = client.get(reverse("export-list", args=[demo.slug])).content.decode()
    assert f"Monte Carlo of {demo_policy.POLICY_NAME}" in demo_form
