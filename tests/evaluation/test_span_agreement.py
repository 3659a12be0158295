"""The "between humans" page's span labels table: per span schema and pair of
annotators, the per-value IoU and per-step agreement over the trajectories both put
spans on."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from evaluation.span_agreement import span_agreement_pairs
from labeling.selectors import labeling_state_for_user
from labeling.services import span_label_set, span_schema_save
from tests.factories import MembershipFactory, UserFactory, trajectory_with_steps
from trajectories.models import Membership, Project

pytestmark = pytest.mark.django_db


def test_pairs_agree_by_overlap_over_shared_trajectories(
    client: Client, owner: User, project: Project
) -> None:
    span_schema_save(project=project, name="triage")
    first = trajectory_with_steps(project, [f"step {n}" for n in range(6)], external_id="a")
    alone = trajectory_with_steps(project, [f"step {n}" for n in range(6)], external_id="b")
    people = {}
    for name in ("ann", "bea", "cid"):
        people[name] = UserFactory.create(username=name)
        MembershipFactory.create(
            user=people[name], project=project, role=Membership.Role.RESEARCHER
        )

    def span(name: str, trajectory: int, start: int, end: int, value: str) -> None:
        state = labeling_state_for_user(people[name], trajectory)
        span_label_set(state=state, schema="triage", start=start, end=end, value=value)

    span("ann", first.pk, 0, 3, "regression")
    span("bea", first.pk, 2, 3, "regression")
    # Only ann's on the second trajectory: not shared with bea, left out of their pair.
    span("ann", alone.pk, 0, 5, "regression")
    span("cid", alone.pk, 0, 5, "useful exploration")

    (triage,) = span_agreement_pairs(project)
    assert triage.schema == "triage"
    pairs = {(p.first, p.second): p for p in triage.pairs}
    assert set(pairs) == {("ann", "bea"), ("ann", "cid")}
    ann_bea = pairs[("ann", "bea")]
    assert ann_bea.trajectories == 1
    assert dict(ann_bea.iou)["regression"] == 0.5
    assert dict(ann_bea.iou)["decisive progress"] is None
    assert ann_bea.step_agreement == 0.5
    assert dict(pairs[("ann", "cid")].iou)["regression"] == 0.0

    client.force_login(owner)
    page = client.get(reverse("compare-humans", args=[project.slug])).content.decode()
    assert "Span labels" in page and 'id="humans-spans-1"' in page
    assert "ann · bea" in page and "0.50" in page


def test_no_table_without_two_annotators(client: Client, owner: User, project: Project) -> None:
    span_schema_save(project=project, name="triage")
    trajectory = trajectory_with_steps(project, ["one", "two"], external_id="a")
    span_label_set(
        state=labeling_state_for_user(owner, trajectory.pk),
        schema="triage",
        start=0,
        end=1,
        value="regression",
    )
    assert span_agreement_pairs(project) == []
    client.force_login(owner)
    page = client.get(reverse("compare-humans", args=[project.slug])).content.decode()
    assert "humans-spans" not in page
