"""A judge's critique beside its step score on the trajectory page: escaped (model output
is untrusted), on the step it belongs to, and readable on a laptop and a phone."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from scoring import services
from scoring.models import ScoringRun
from tests.browser import sign_in
from tests.conftest import celery_worker_log
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.scoring.conftest import OpenAIServer
from tests.scoring.test_attribution_views_api import browser, columns, evidence
from tests.scoring.test_judge_runs import remote_judge, run_judge
from tests.screens import WIDEST, shot
from tests.waiting import wait_until
from trajectories.models import Membership, Project, Trajectory
from trajectories.services import project_create

PASSWORD = "pw-for-tests"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> 13 - 4 is 9, not 8.'


def judged(project: Project, server: OpenAIServer, *, on_worker: bool = False) -> Trajectory:
    """A trajectory judged once per step (step 1 wrong) by a remote judge. A test on
    committed rows (``transaction=True``) runs it ``on_worker``: there the run's start
    hands it to the Celery worker as it commits, and a run scored here as well would ask
    for the fixed replies twice over."""
    trajectory = trajectory_with_steps(
        project, ["16 - 3 = 13 eggs remain.", "13 - 4 = 8 to sell.", "8 * 2 = 16 dollars."]
    )
    server.control(
        fixed_replies=[
            "Subtracting the eaten eggs is right. \\boxed{+1}",
            f"{HOSTILE} \\boxed{{-1}}",
            "I cannot tell.",
        ]
    )
    scorer = remote_judge(project, server, concurrency=1)
    if on_worker:
        run = services.scoring_run_start(project=project, scorer=scorer)
        assert wait_until(
            lambda: ScoringRun.objects.get(pk=run.pk).status in ("done", "failed"), timeout=120
        ), celery_worker_log()
        run.refresh_from_db()
    else:
        run = run_judge(project, scorer)
    assert run.status == "done" and run.metrics["parse_failures"] == 1, run.error
    return trajectory


@pytest.mark.django_db
def test_the_critique_is_shown_escaped_on_its_step(
    project: Project, owner: User, openai_server: OpenAIServer
) -> None:
    trajectory = judged(project, openai_server)
    html = columns(browser(owner), trajectory, **{"from": 0})
    steps = list(trajectory.steps.order_by("index").values_list("pk", flat=True))
    blocks = {pk: html.split(f'id="step-evidence-{pk}"')[1].split("</aside>")[0] for pk in steps}
    assert "Subtracting the eaten eggs is right." in blocks[steps[0]]
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in blocks[steps[1]]
    assert "<script>" not in html and "<img" not in html
    assert ">judge<" in blocks[steps[1]]
    # The unparsed reply gives no score and no critique.
    assert "critique" not in blocks[steps[2]]
    # A judge has no gradients to explain: no token saliency link.
    assert reverse("step-saliency", args=[steps[0]]) not in html


@pytest.mark.django_db
def test_the_score_strip_names_a_judge_as_a_judge(
    project: Project, owner: User, openai_server: OpenAIServer
) -> None:
    trajectory = judged(project, openai_server)
    html = evidence(browser(owner), trajectory)
    label = html.split('class="strip-label"')[1].split("</span></span>")[0]
    assert ">Judge <span" in label and 'class="muted">remote' in label and "PRM" not in label
    assert 'aria-label="Step Judge scores"' in html
    # Where the judge puts the first error (step 1, judged wrong).
    assert "Judge · step 1" in html and "PRM · step" not in html


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_critique_opens_beside_the_score_on_a_laptop_and_a_phone(
    page: Any,
    live_server: Any,
    celery_worker: object,
    openai_server: OpenAIServer,
    width: int,
    height: int,
) -> None:
    project = project_create(slug="demo", name="Demo")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    trajectory = judged(project, openai_server, on_worker=True)
    wrong = trajectory.steps.get(index=1)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "owner", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    critique = f"#step-evidence-{wrong.pk} .judge-critique"
    page.wait_for_selector(critique)
    page.click(f"{critique} summary")
    text = page.inner_text(f"{critique} p")
    assert text.startswith('<script>alert("x")</script>') and "not 8." in text
    page.locator(critique).scroll_into_view_if_needed()
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"judge-critique-{width}")


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_judge_strip_reads_judge_on_a_laptop_and_a_phone(
    page: Any,
    live_server: Any,
    celery_worker: object,
    openai_server: OpenAIServer,
    width: int,
    height: int,
) -> None:
    project = project_create(slug="demo", name="Demo")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    trajectory = judged(project, openai_server, on_worker=True)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "owner", PASSWORD)
    page.goto(live_server.url + reverse("trajectory-detail", args=[trajectory.pk]))
    page.wait_for_selector("#score-strip")
    assert page.inner_text("#evidence .strip-label").split() == ["Judge", "remote"]
    assert "Judge · step 1" in page.inner_text(".first-errors")
    assert page.evaluate(WIDEST, width) == []
    shot(page, f"judge-strip-{width}")


@pytest.mark.django_db
def test_the_run_form_says_what_an_over_long_prompt_does_and_the_row_lists_the_skipped(
    client: Any, project: Project, owner: User, openai_server: OpenAIServer
) -> None:
    long = trajectory_with_steps(project, ["Carry the digit. " * 300])
    trajectory_with_steps(project, ["2 + 2 = 4"])
    openai_server.control(fixed_reply="Right. \\boxed{+1}")
    scorer = remote_judge(project, openai_server, concurrency=1)
    run = run_judge(project, scorer)
    assert run.status == "done" and run.metrics["skipped_count"] == 1, run.error

    client.force_login(owner)
    section = reverse("scoring-section", args=[project.slug])
    html = client.get(section).content.decode()
    row = html.split(f'id="scoring-run-{run.pk}"')[1].split("</tr>")[0]
    step = long.steps.get()
    assert "1 skipped: prompt too long" in row
    assert f"step {step.pk} of" in row and reverse("trajectory-detail", args=[long.pk]) in row
    assert "passes the endpoint&#x27;s context of 768 tokens" in row
    assert 'name="on_too_long"' in html and "fail the run" in html

    start = reverse("scoring-run-start", args=[project.slug])
    client.post(start, {"scorer": scorer.pk, "on_too_long": "fail"})
    newest = ScoringRun.objects.order_by("-pk").first()
    assert newest is not None and newest.parameters == {"on_too_long": "fail"}


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_skipped_prompts_of_a_run_read_on_a_laptop_and_a_phone(
    page: Any, live_server: Any, width: int, height: int
) -> None:
    project = project_create(slug="demo", name="Demo")
    owner = UserFactory.create(username="owner", password=PASSWORD)
    MembershipFactory.create(user=owner, project=project, role=Membership.Role.ADMIN)
    long = trajectory_with_steps(project, ["Carry the digit. " * 300])
    step = long.steps.get()
    scorer = services.judge_create(
        name="a-judge-with-a-rather-long-name",
        model_ref="m",
        project=project,
        parameters={"backend": "remote", "base_url": "http://127.0.0.1:9/v1"},
    )
    reason = (
        f"the prompt for step {step.pk} of trajectory {long.pk} is 1215 tokens; with"
        " max_tokens 16 it passes the endpoint's context of 768 tokens"
    )
    run = ScoringRun.objects.create(
        project=project,
        scorer=scorer,
        status="done",
        total=1,
        done=1,
        parameters={"on_too_long": "skip"},
        metrics={
            "skipped": [{"trajectory": long.pk, "step": step.pk, "reason": reason}],
            "skipped_count": 1,
        },
    )
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, live_server, "owner", PASSWORD)
    page.goto(live_server.url + reverse("scoring-section", args=[project.slug]))
    skipped = f"#scoring-run-{run.pk}-skipped"
    page.click(f"{skipped} summary")
    assert "passes the endpoint's context of 768 tokens" in page.inner_text(skipped)
    page.locator(skipped).scroll_into_view_if_needed()
    shot(page, f"judge-run-skipped-{width}")
    # The runs table scrolls sideways on a phone, by design (.table); the page does not,
    # and the reasons wrap inside their cell.
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.locator(skipped).bounding_box()["width"] <= max(width * 0.6, 400)
