"""The export form's rubric field in Chromium: it lists the rubric sources with marks, and
choosing a judge's rubric run puts its results in the preview's records; at a laptop's
and a phone's size."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from labeling.models import StepLabel
from tests.browser import sign_in
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.test_rubric_sources import rubric_world
from tests.screens import UNLABELLED, WIDEST, shot
from trajectories.models import Membership, Step
from trajectories.services import project_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_export_form_takes_a_rubric_source(page: Any, live_server: Any) -> None:
    project = project_create(slug="rb", name="Rubric runs")
    rubric_world(project)
    # Step labels, so that the records are built (every step good, by ann1).
    schema = project.label_schemas.get(is_active=True)
    ann1 = User.objects.get(username="ann1")
    StepLabel.objects.bulk_create(
        StepLabel(step=step, annotator=ann1, schema=schema, value=1, status="submitted")
        for step in Step.objects.filter(trajectory__project=project)
    )
    user = UserFactory.create(username="exporter")
    MembershipFactory.create(user=user, project=project, role=Membership.Role.RESEARCHER)
    page.set_viewport_size({"width": 1440, "height": 900})
    sign_in(page, live_server, "exporter", "pw-for-tests")
    page.goto(live_server.url + reverse("export-list", args=["rb"]))
    options = page.locator("#id_rubric option").all_inner_texts()
    assert options == [
        "none",
        "human:majority",
        "human:ann1",
        "human:ann2",
        "human:ann3",
        "judge:judge",
    ]
    page.select_option("#id_format", "trl-stepwise")
    page.select_option("#id_labels", "human:ann1")
    page.select_option("#id_neutral", "drop")
    page.select_option("#id_rubric", "judge:judge")
    page.wait_for_function(
        "() => document.querySelector('#export-preview .preview-record')"
        "?.textContent.includes('rubric_reward')"
    )
    assert page.evaluate(UNLABELLED) == []
    page.locator("#id_rubric").scroll_into_view_if_needed()
    shot(page, "export-rubric-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#id_rubric").scroll_into_view_if_needed()
    shot(page, "export-rubric-390")
    assert page.evaluate(WIDEST, 390) == []
