"""The trajectory page's scorer picker: which scorer's scores (and which run's credits)
the page shows beside the steps, by the page's ``?scorer=`` and ``?credit=``, remembered
per user and project, and followed by the PRM first-error flag and token saliency."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from scoring import prm, services
from scoring.models import AttributionRun, EvidenceChoice, Scorer, ScoringRun
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from tests.scoring.test_attribution_runs import make_rollouts, run_to_completion
from tests.scoring.test_attribution_views_api import HTMX, browser, evidence, scored
from trajectories.models import Membership, Project, Trajectory
from trajectories.services import project_create

pytestmark = pytest.mark.django_db


def strip_values(top: str) -> list[str]:
    """The PRM strip's values, step by step (its cells' titles: ``step N: 0.900``)."""
    strip = top.split('id="score-strip"')[1].split("</div>")[0]
    return re.findall(r"step \d+: (\d\.\d+)", strip)


@pytest.fixture
def two_scorers(project: Project) -> tuple[Trajectory, Scorer, Scorer]:
    a = make_rollouts(project)["A"]
    older = scored(project, [a], [[0.9, 0.8, 0.7]], name="older-prm")
    # The one that finished last is the default.
    newer = scored(project, [a], [[0.9, 0.3, 0.2]], name="newer-prm")
    return a, older, newer


def test_the_page_shows_the_last_finished_scorer_and_offers_every_scorer_with_scores(
    owner: User, two_scorers: tuple[Trajectory, Scorer, Scorer]
) -> None:
    a, older, newer = two_scorers
    top = evidence(browser(owner), a)
    assert strip_values(top) == ["0.900", "0.300", "0.200"]
    assert f'<option value="{newer.pk}" selected>newer-prm · 3 steps</option>' in top
    assert f'<option value="{older.pk}">older-prm · 3 steps</option>' in top
    assert "PRM · step 1" in top


def test_the_address_picks_the_scorer_and_the_prm_first_error_follows(
    owner: User, two_scorers: tuple[Trajectory, Scorer, Scorer]
) -> None:
    a, older, _ = two_scorers
    client = browser(owner)
    top = evidence(client, a, scorer=older.pk)
    assert strip_values(top) == ["0.900", "0.800", "0.700"]
    assert f'<option value="{older.pk}" selected>' in top
    assert "PRM · step" not in top  # older-prm never drops under 0.5
    # A request from the page (a saved row's column) reads the page's address.
    page_url = "http://testserver" + reverse("trajectory-detail", args=[a.pk])
    column = client.get(
        reverse("trajectory-evidence", args=[a.pk]),
        {"part": "step", "step": str(a.steps.get(index=1).pk)},
        headers={**HTMX, "HX-Current-URL": f"{page_url}?scorer={older.pk}"},
    ).content.decode()
    assert "0.80" in column and "0.30" not in column


def test_the_pick_is_remembered_per_user_and_project(
    project: Project,
    owner: User,
    annotator: User,
    two_scorers: tuple[Trajectory, Scorer, Scorer],
) -> None:
    a, older, newer = two_scorers
    delta = run_to_completion(
        services.attribution_run_start(project=project, method="prm-delta", scorer=older)
    )
    # The newest run, shown by default.
    run_to_completion(services.attribution_run_start(project=project, method="mc-prefix"))
    client = browser(owner)
    response = client.post(
        reverse("trajectory-evidence-choose", args=[a.pk]), {"scorer": older.pk, "credit": delta.pk}
    )
    assert response.status_code == 302
    assert response["Location"] == (
        reverse("trajectory-detail", args=[a.pk]) + f"?scorer={older.pk}&credit={delta.pk}"
    )
    choice = EvidenceChoice.objects.get(user=owner, project=project)
    assert (choice.scorer_id, choice.credit_run_id) == (older.pk, delta.pk)
    # Without anything in the address, the owner's pages now show the pick...
    top = evidence(client, a)
    assert strip_values(top) == ["0.900", "0.800", "0.700"]
    assert f'<option value="{delta.pk}" selected>' in top
    # ...and an annotator's still the default.
    assert strip_values(evidence(browser(annotator), a)) == ["0.900", "0.300", "0.200"]
    # The address still wins over the pick.
    assert strip_values(evidence(client, a, scorer=newer.pk)) == ["0.900", "0.300", "0.200"]
    # Another project of the owner's is not affected.
    other = project_create(slug="other", name="other")
    assert not EvidenceChoice.objects.filter(user=owner, project=other).exists()


def test_a_scorer_of_another_project_is_refused(
    project: Project, owner: User, two_scorers: tuple[Trajectory, Scorer, Scorer]
) -> None:
    a, _, newer = two_scorers
    other = project_create(slug="elsewhere", name="elsewhere")
    foreign = Scorer.objects.create(
        project=other, name="foreign", kind=prm.EXTERNAL, queue="default"
    )
    client = browser(owner)
    response = client.post(
        reverse("trajectory-evidence-choose", args=[a.pk]), {"scorer": foreign.pk}, follow=True
    )
    assert f"no scorer {foreign.pk} in project" in response.content.decode()
    assert not EvidenceChoice.objects.exists()
    # Asked for in the address, it is ignored: the default is shown.
    top = evidence(client, a, scorer=foreign.pk)
    assert f'<option value="{newer.pk}" selected>' in top


def test_outsiders_cannot_pick(
    two_scorers: tuple[Trajectory, Scorer, Scorer],
) -> None:
    a, older, _ = two_scorers
    stranger = UserFactory.create(username="stranger")
    elsewhere = project_create(slug="theirs", name="theirs")
    MembershipFactory.create(user=stranger, project=elsewhere, role=Membership.Role.ADMIN)
    response = browser(stranger).post(
        reverse("trajectory-evidence-choose", args=[a.pk]), {"scorer": older.pk}
    )
    assert response.status_code == 404
    assert not EvidenceChoice.objects.exists()


def test_token_saliency_explains_the_picked_scorer(
    project: Project, owner: User, make_scorer: Any
) -> None:
    """The newest scores are imported (no model to run); picking a model scorer on the
    page makes the saliency button compute with it instead of refusing."""
    trajectory = trajectory_with_steps(project, ["2 + 2 = 4", "so the answer is 4"])
    tiny = make_scorer(name="tiny")
    ScoringRun.objects.create(project=project, scorer=tiny, status="done")
    scored(project, [trajectory], [[0.9, 0.8]], name="imported-prm")
    step = trajectory.steps.get(index=1)
    url = reverse("step-saliency", args=[step.pk])
    client = browser(owner)
    assert "no model to run" in client.post(url, headers=HTMX).content.decode()
    page_url = "http://testserver" + reverse("trajectory-detail", args=[trajectory.pk])
    picked = {**HTMX, "HX-Current-URL": f"{page_url}?scorer={tiny.pk}"}
    shown = client.get(url, headers=picked).content.decode()
    assert "with tiny</button>" in shown
    client.post(url, headers=picked)
    run = AttributionRun.objects.get(method="token-saliency")
    assert run.scorer == tiny
