"""The review table: every annotator's submitted label with its tags, rationale and
correction, the same disagreement count as the review list, and a filter."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from evaluation import kept
from evaluation.models import KeptSummary
from labeling.models import LabelSchema, Queue, StepLabel
from labeling.services import step_label_set, trajectory_submit
from tests.factories import MembershipFactory, UserFactory
from tests.labeling.conftest import leased_state, state, step_at
from trajectories.models import Membership, Trajectory
from trajectories.services import imported_annotator

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewed(
    queue: Queue,
    annotator: User,
    annotator2: User,
    trajectory: Trajectory,
    schema: LabelSchema,
) -> Trajectory:
    """Two annotators who differ on step 1 only; an import that differs from both on
    step 3; a third person's unsubmitted draft that differs on step 4."""
    step_label_set(
        state=leased_state(annotator, queue),
        step=step_at(trajectory, 1),
        value=-1,
        tags=["calculation error"],
        rationale="3x + 2 = 11 gives $x = 3$, not 4.",
        correction="Then 3x + 2 = 11, so $x = 3$.",
    )
    for index in (0, 2, 3, 4):
        step_label_set(
            state=state(annotator, trajectory, queue), step=step_at(trajectory, index), value=1
        )
    trajectory_submit(state=state(annotator, trajectory, queue))
    for index, value in enumerate([1, 1, 1, 1, 1]):
        step_label_set(
            state=leased_state(annotator2, queue)
            if index == 0
            else state(annotator2, trajectory, queue),
            step=step_at(trajectory, index),
            value=value,
        )
    trajectory_submit(state=state(annotator2, trajectory, queue))
    imported = imported_annotator("prm800k")
    StepLabel.objects.create(
        step=step_at(trajectory, 3), schema=schema, annotator=imported, value=-1, status="submitted"
    )
    drafter = UserFactory.create(username="drafter")
    MembershipFactory.create(
        user=drafter, project=trajectory.project, role=Membership.Role.ANNOTATOR
    )
    StepLabel.objects.create(
        step=step_at(trajectory, 4), schema=schema, annotator=drafter, value=-1, status="draft"
    )
    return trajectory


def review(client: Client, trajectory: Trajectory, **params: str) -> str:
    response = client.get(reverse("review-trajectory", args=[trajectory.pk]), params)
    assert response.status_code == 200
    return response.content.decode()


def marked_rows(html: str) -> list[str]:
    return re.findall(r'class="review-row has-disagreement" id="review-(\d+)"', html)


def test_the_table_shows_tags_rationale_and_correction(
    client: Client, researcher: User, reviewed: Trajectory
) -> None:
    client.force_login(researcher)
    html = review(client, reviewed)
    row = html.split(f'id="review-{step_at(reviewed, 1).pk}"')[1].split("</tr>")[0]
    assert '<li class="tag">calculation error</li>' in row
    assert "Rationale:</span> 3x + 2 = 11 gives" in row
    assert '<span class="math math-inline">$x = 3$</span>' in row  # typeset in the browser
    assert "<summary>Correction</summary>" in row and "Then 3x + 2 = 11, so" in row
    # The import is a column; the unsubmitted draft is not.
    assert "<th>import:prm800k</th>" in html
    assert "drafter" not in html


def test_the_disagreement_count_is_the_lists_and_the_marked_rows(
    client: Client, researcher: User, reviewed: Trajectory
) -> None:
    client.force_login(researcher)
    listing = client.get(reverse("review-list", args=[reviewed.project.slug])).content.decode()
    cells = re.search(rf'id="review-candidate-{reviewed.pk}".*?</tr>', listing, flags=re.S)
    assert cells is not None
    numbers = re.findall(r'<td class="num">(\d+)</td>', cells.group(0))
    listed = int(numbers[2])  # steps, annotators, disagreements, final labels
    html = review(client, reviewed)
    # Only step 1: people disagree there; the import (step 3) and the draft (step 4) do
    # not make a disagreement.
    assert marked_rows(html) == [str(step_at(reviewed, 1).pk)]
    assert listed == 1
    assert "<strong>1</strong> of 5 labelled steps where annotators disagree" in html


def test_the_filter_keeps_disagreements_unresolved_noted_and_tagged_rows(
    client: Client, researcher: User, reviewed: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(researcher)
    disagreeing = str(step_at(reviewed, 1).pk)

    def rows(**params: str) -> list[str]:
        return re.findall(r'id="review-(\d+)" data-row', review(client, reviewed, **params))

    assert len(rows()) == 5
    assert rows(show="disagreements") == [disagreeing]
    assert rows(show="notes") == [disagreeing]
    assert rows(tag="calculation error") == [disagreeing]
    assert rows(show="unresolved") == [disagreeing]
    client.post(reverse("final-label", args=[disagreeing]), {"value": "-1", "schema": schema.pk})
    assert rows(show="unresolved") == []
    assert "No step matches the filter." in review(client, reviewed, show="unresolved")
    # An unknown filter shows everything rather than failing.
    assert len(rows(show="nonsense", tag="no such tag")) == 5


def test_a_large_projects_review_list_is_kept_and_counted_by_a_worker(
    client: Client, researcher: User, reviewed: Trajectory, settings: Any
) -> None:
    """Finding what to review is a pass over every label of the schema (6 s at a million
    steps, #37): past STEPSCOPE_SUMMARY_INLINE_STEPS a worker makes the list while the page
    says so, and then shows the kept list, with its age once labels move."""
    settings.STEPSCOPE_SUMMARY_INLINE_STEPS = 0
    client.force_login(researcher)
    url = reverse("review-list", args=[reviewed.project.slug])
    html = client.get(url).content.decode()
    assert "a worker is counting this summary" in html
    assert f'id="review-candidate-{reviewed.pk}"' not in html
    assert "Nothing to review yet" not in html

    row = KeptSummary.objects.get(project=reviewed.project, page="review")
    assert kept.summary_refresh(project_id=reviewed.project_id, page="review", params=row.params)
    html = client.get(url).content.decode()
    assert f'id="review-candidate-{reviewed.pk}"' in html
    assert "counting" not in html

    StepLabel.objects.filter(step=step_at(reviewed, 1), value=-1).update(value=1)
    html = client.get(url).content.decode()
    assert f'id="review-candidate-{reviewed.pk}"' in html
    assert "a worker is counting them again" in html
