"""Span review and adjudication: a reviewer sees the annotators' spans side by side on
``/t/<id>/review/spans/``, picks one as final or sets a range and value, removes one,
every change kept; refusals name the field; annotators may not; the ``spans`` export
carries the final spans as ``human:adjudicated``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import FinalSpan, FinalSpanEvent, SpanLabel, SpanSchema
from labeling.services import span_label_set, span_schema_save
from tests.exports.test_exports import export
from tests.labeling.conftest import state
from trajectories.models import Project, Trajectory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def triage(project: Project) -> SpanSchema:
    return span_schema_save(project=project, name="triage")


@pytest.fixture
def two_views(
    owner: User, researcher: User, trajectory: Trajectory, triage: SpanSchema
) -> tuple[SpanLabel, SpanLabel]:
    """The owner calls steps 0-2 a regression; the researcher only 1-2."""
    mine, _ = span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=2, value="regression"
    )
    theirs, _ = span_label_set(
        state=state(researcher, trajectory), schema="triage", start=1, end=2, value="regression"
    )
    return mine, theirs


def _page(trajectory: Trajectory) -> str:
    return reverse("review-spans", args=[trajectory.pk])


def test_the_reviewer_sees_the_annotators_side_by_side(
    client: Client, owner: User, trajectory: Trajectory, two_views: tuple[SpanLabel, SpanLabel]
) -> None:
    client.force_login(owner)
    page = client.get(_page(trajectory)).content.decode()
    assert 'data-annotator="owner"' in page and 'data-annotator="researcher"' in page
    # Step 0 is covered by the owner only: a disagreement row; steps 1 and 2 agree.
    assert page.count('class="review-row has-disagreement"') == 1
    assert page.count('class="review-row"') == 2
    assert "IoU regression 0.67" in page


def test_a_pick_sets_the_final_span_and_a_removal_takes_it_away_with_history(
    client: Client,
    owner: User,
    researcher: User,
    trajectory: Trajectory,
    two_views: tuple[SpanLabel, SpanLabel],
) -> None:
    _, theirs = two_views
    client.force_login(researcher)
    response = client.post(_page(trajectory), {"pick": theirs.pk}, headers=HTMX)
    assert response.status_code == 200
    assert "Final: steps 1-2 · regression (triage)." in response.content.decode()
    final = FinalSpan.objects.get(trajectory=trajectory)
    assert (final.start_index, final.end_index, final.value) == (1, 2, "regression")
    assert final.adjudicator == researcher
    # A range and value of the reviewer's own, beside it.
    response = client.post(
        _page(trajectory),
        {"schema": theirs.schema_id, "start": 3, "end": 4, "value": "useful exploration"},
    )
    assert response.status_code == 302
    assert FinalSpan.objects.filter(trajectory=trajectory).count() == 2
    client.post(_page(trajectory), {"remove": final.pk}, headers=HTMX)
    assert list(FinalSpan.objects.values_list("start_index", flat=True)) == [3]
    labels = list(FinalSpanEvent.objects.order_by("pgh_id").values_list("pgh_label", flat=True))
    assert labels == ["insert", "insert", "delete"]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"start": 0, "end": 9, "value": "regression"}, "Final span end 9 is not a step"),
        ({"start": 3, "end": 1, "value": "regression"}, "Final span start 3 is after its end 1"),
        ({"start": 0, "end": 1, "value": "loop"}, "Final span value &#x27;loop&#x27; is not one"),
        ({"pick": 999999}, "pick: no span &#x27;999999&#x27; on this trajectory"),
    ],
)
def test_bad_final_spans_are_refused_naming_the_field(
    client: Client, owner: User, trajectory: Trajectory, triage: SpanSchema, data: dict, says: str
) -> None:
    client.force_login(owner)
    if "pick" not in data:
        data = {"schema": triage.pk, **data}
    response = client.post(_page(trajectory), data, headers=HTMX)
    assert response.status_code in (400, 404)
    assert says in response.content.decode()
    assert not FinalSpan.objects.exists()


def test_an_unknown_field_is_a_400_naming_it(
    client: Client, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    client.force_login(owner)
    response = client.post(_page(trajectory), {"pick": 1, "colour": "red"})
    assert response.status_code == 400
    assert "Unknown field: colour" in response.content.decode()


def test_an_annotator_may_not_review(
    client: Client,
    annotator: User,
    trajectory: Trajectory,
    two_views: tuple[SpanLabel, SpanLabel],
) -> None:
    client.force_login(annotator)
    assert client.get(_page(trajectory)).status_code == 403
    assert client.post(_page(trajectory), {"pick": two_views[0].pk}).status_code == 403
    assert not FinalSpan.objects.exists()


def test_the_spans_export_carries_the_final_spans_as_adjudicated(
    client: Client,
    owner: User,
    trajectory: Trajectory,
    two_views: tuple[SpanLabel, SpanLabel],
    tmp_path: Path,
) -> None:
    client.force_login(owner)
    client.post(_page(trajectory), {"pick": two_views[1].pk})
    export(
        "--project",
        trajectory.project.slug,
        "--format",
        "spans",
        "--labels",
        "human:majority",
        "--neutral",
        "keep",
        "--out",
        str(tmp_path),
    )
    (record,) = [json.loads(x) for x in (tmp_path / "spans.jsonl").read_text().splitlines()]
    adjudicated = [s for s in record["segments"] if s["annotator"] == "human:adjudicated"]
    assert adjudicated == [
        {
            "schema": "triage",
            "start": 1,
            "end": 2,
            "value": "regression",
            "annotator": "human:adjudicated",
        }
    ]
    assert record["step_values"]["triage"]["human:adjudicated"] == [
        [],
        ["regression"],
        ["regression"],
        [],
        [],
    ]
    assert set(record["step_values"]["triage"]) == {"human:adjudicated", "owner", "researcher"}
