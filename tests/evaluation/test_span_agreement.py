"""The "between humans" page's span labels table: per span schema and pair of
annotators, the per-value IoU and per-step agreement over the trajectories both put
spans on."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from evaluation.compare import slice_parse
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


def test_the_span_table_follows_a_trajectory_or_annotator_slice(
    client: Client, owner: User, project: Project
) -> None:
    span_schema_save(project=project, name="triage")
    steps = [f"step {n}" for n in range(6)]
    small = trajectory_with_steps(project, steps, external_id="a", model_name="small")
    large = trajectory_with_steps(project, steps, external_id="b", model_name="large")
    people = {}
    for name in ("ann", "bea", "cid"):
        people[name] = UserFactory.create(username=name)
        MembershipFactory.create(
            user=people[name], project=project, role=Membership.Role.RESEARCHER
        )

    def span(name: str, trajectory: int, start: int, end: int) -> None:
        state = labeling_state_for_user(people[name], trajectory)
        span_label_set(state=state, schema="triage", start=start, end=end, value="regression")

    # On the small model's trajectory ann and bea agree exactly; on the large one half.
    span("ann", small.pk, 0, 3)
    span("bea", small.pk, 0, 3)
    span("ann", large.pk, 0, 3)
    span("bea", large.pk, 2, 3)
    span("cid", large.pk, 0, 5)

    def pairs(piece: str) -> dict[tuple[str, str], float | None]:
        (triage,) = span_agreement_pairs(project, slice_parse(piece))
        return {(p.first, p.second): dict(p.iou)["regression"] for p in triage.pairs}

    assert pairs("") == {("ann", "bea"): 0.75, ("ann", "cid"): 4 / 6, ("bea", "cid"): 2 / 6}
    assert pairs("model=small") == {("ann", "bea"): 1.0}
    assert pairs("model=large") == {
        ("ann", "bea"): 0.5,
        ("ann", "cid"): 4 / 6,
        ("bea", "cid"): 2 / 6,
    }
    assert pairs("annotator=cid") == {("ann", "cid"): 4 / 6, ("bea", "cid"): 2 / 6}
    # A step-kind slice: spans do not follow it; the table is the whole project's.
    assert pairs("kind=thought") == pairs("")

    client.force_login(owner)
    url = reverse("compare-humans", args=[project.slug])
    sliced = client.get(url, {"slice": "model=small"}).content.decode()
    assert "ann · bea" in sliced and "ann · cid" not in sliced
    assert "in the slice model=small:" in sliced
    whole = client.get(url, {"slice": "kind=thought"}).content.decode()
    assert "ann · cid" in whole and "which spans do not follow" in whole
