"""The trajectory page's scores and credit in a real browser: headless Chromium against a
live server. The strips and every step's credit column load after the page shows, a
saved label keeps its row's column, picking another run changes the credits, and token
saliency opens under one step on demand."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from scoring import prm, services
from scoring.models import Scorer, ScoringRun, StepScore
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.scoring.conftest import TinyModels
from tests.scoring.test_attribution_runs import run_to_completion
from tests.screens import shot
from trajectories.models import Membership
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "pw-for-tests"


def test_scores_and_credits_load_into_the_trajectory_page(
    page: Any, live_server: Any, tiny_models: TinyModels
) -> None:
    project = project_create(slug="demo", name="Demo")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    failed = trajectory_with_steps(
        project,
        ["16 - 3 = 13 eggs remain.", "13 - 4 = 8 to sell.", "8 * 2 = 16 dollars."],
        task_key="eggs",
        success=False,
        outcome_reward=0.0,
    )
    trajectory_with_steps(
        project,
        ["16 - 3 = 13 eggs remain.", "13 - 4 = 9 to sell.", "9 * 2 = 18 dollars."],
        task_key="eggs",
        success=True,
        outcome_reward=1.0,
    )
    scorer = Scorer.objects.create(
        project=project,
        name="tiny",
        kind=prm.TOKEN_CLASSIFICATION,
        model_ref=str(tiny_models.token_classifier),
    )
    steps = list(failed.steps.order_by("index"))
    for step, value in zip(steps, [0.9, 0.3, 0.2], strict=True):
        StepScore.objects.create(step=step, scorer=scorer, value=value)
    ScoringRun.objects.create(project=project, scorer=scorer, kind="import", status="done")
    delta = run_to_completion(
        services.attribution_run_start(project=project, method="prm-delta", scorer=scorer)
    )
    run_to_completion(services.attribution_run_start(project=project, method="mc-prefix"))
    run_to_completion(
        services.attribution_run_start(
            project=project, method="token-saliency", scorer=scorer, step=steps[1]
        )
    )

    sign_in(page, live_server, "owner", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[failed.pk]))

    # The strips arrive after the page shows: PRM, MC, and the newest run's credits.
    page.wait_for_selector("#score-strip")
    assert page.locator("#mc-strip .score-cell").count() == 3
    assert page.locator("#credit-strip .score-cell").count() == 3
    # Every step's column is filled out of band: MC credits from the newest run (step 1
    # of the failure leads nowhere good: 0 against the shared first step's 1/2).
    column = f"#step-evidence-{steps[1].pk}"
    page.wait_for_selector(f"{column} .step-credit")
    assert page.locator(f"{column} .step-credit").inner_text().strip() == "-0.500"
    assert "0.30" in page.locator(f"{column} .step-score").first.inner_text()
    flags = page.locator(".first-errors").inner_text()
    assert "PRM · step 1" in flags and "MC · step 1" in flags

    # Pick the PRM-delta run: the credits change.
    page.select_option("#credit-run", str(delta.pk))
    page.click(".credit-picker button")
    page.wait_for_url(f"**credit={delta.pk}**")
    page.wait_for_selector(f"{column} .step-credit")
    assert page.locator(f"{column} .step-credit").inner_text().strip() == "-0.600"

    # Label the step: the row comes back alone and loads its own column, same run.
    page.locator(f"#step-{steps[1].pk} .label-button").first.click()
    page.wait_for_selector(f"#step-{steps[1].pk}[data-value]")
    page.wait_for_selector(f"{column} .step-credit")
    assert page.locator(f"{column} .step-credit").inner_text().strip() == "-0.600"

    # Token saliency opens under the step on demand.
    page.locator(f"{column} a", has_text="token saliency").click()
    page.wait_for_selector(f"#step-extra-{steps[1].pk} .saliency-token")
    tokens = page.locator(f"#step-extra-{steps[1].pk} .saliency-token").all_inner_texts()
    assert "".join(tokens) == steps[1].content
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        shot(page, f"evidence-columns-{width}")


def test_without_scores_the_steps_stay_put_when_the_strips_and_columns_load(
    page: Any, live_server: Any
) -> None:
    """The strips and the steps' credit columns load after the page shows; for a
    trajectory with no scores both are empty, so a click aimed at a step as the page
    opens must find it where it was."""
    project = project_create(slug="plain", name="Plain")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    trajectory = trajectory_with_steps(project, ["Look up the booking.", "It is changed."])
    held: list[Any] = []
    page.route("**/evidence/?part=*", lambda route: held.append(route))  # answered later
    sign_in(page, live_server, "owner", PASSWORD)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    steps = page.locator(".step")
    before = [steps.nth(0).bounding_box(), steps.nth(1).bounding_box()]
    assert page.locator("#evidence[hx-get], .evidence-loader").count() == 2  # not loaded yet
    for _ in range(100):  # each call to the browser delivers what it has sent, routes too
        if len(held) == 2:
            break
        page.evaluate("0")
    assert sorted(route.request.url.split("part=")[1][:3] for route in held) == ["col", "top"]
    for route in held:
        route.continue_()
    page.locator("#evidence:not([hx-get])").wait_for(state="attached")
    page.locator(".evidence-loader").wait_for(state="detached")
    assert page.locator("#evidence").inner_text().strip() == ""
    assert [steps.nth(0).bounding_box(), steps.nth(1).bounding_box()] == before
