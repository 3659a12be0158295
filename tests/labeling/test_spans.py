"""Span labels: span schemas, a value on a run of steps through the service, the page's
panel and the API, with history, blind mode, agreement by overlap and the refusals
naming their field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import (
    FinalSpan,
    FinalSpanEvent,
    Queue,
    SpanLabel,
    SpanLabelEvent,
    SpanSchema,
)
from labeling.services import (
    LabelingError,
    NotAllowed,
    final_span_set,
    span_label_delete,
    span_label_set,
    span_schema_save,
)
from labeling.spans import TRIAGE_VALUES
from tests.exports.test_exports import export
from tests.factories import trajectory_with_steps
from tests.labeling.conftest import leased_state, state
from trajectories.models import Project, Trajectory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def triage(project: Project) -> SpanSchema:
    return span_schema_save(project=project, name="triage")


def test_a_new_span_schema_starts_with_the_triage_roles(triage: SpanSchema) -> None:
    assert [e["value"] for e in triage.entries] == [v["value"] for v in TRIAGE_VALUES]


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ([], "values is a non-empty list"),
        ([{"value": "loop", "key": "j"}], "values.0 (loop): key 'j' is a labeling shortcut"),
        ([{"value": "loop", "key": "5"}, {"value": "loop", "key": "6"}], "given twice"),
        ([{"value": "loop", "key": "5"}, {"value": "x", "key": "5"}], "key '5' is given twice"),
        ([{"value": "loop", "shade": "red"}], "values.0: unknown field shade"),
        ([{"value": "loop", "color": "red"}], "values.0.color is a #hex colour"),
    ],
)
def test_span_schema_values_are_checked(project: Project, values: list, says: str) -> None:
    with pytest.raises(LabelingError) as refused:
        span_schema_save(project=project, name="patterns", values=values)
    assert refused.value.field == "values"
    assert says in refused.value.message
    assert not SpanSchema.objects.filter(project=project).exists()


def test_two_active_span_schemas_may_not_share_a_key(project: Project, triage: SpanSchema) -> None:
    with pytest.raises(LabelingError, match="key '1' labels span schema 'triage' already"):
        span_schema_save(project=project, name="patterns", values=[{"value": "loop", "key": "1"}])
    span_schema_save(project=project, name="patterns", values=[{"value": "loop", "key": "7"}])


def test_a_value_in_use_cannot_be_taken_away(
    project: Project, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=1, value="regression"
    )
    kept = [v for v in TRIAGE_VALUES if v["value"] != "regression"]
    with pytest.raises(LabelingError, match="spans carry regression"):
        span_schema_save(project=project, name="triage", values=kept)


def test_a_span_is_set_changed_and_removed_with_history(
    owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    mine = state(owner, trajectory)
    span, created = span_label_set(
        state=mine, schema=triage.pk, start=1, end=3, value="useful exploration"
    )
    assert created and (span.start_index, span.end_index) == (1, 3)
    again, created = span_label_set(state=mine, schema="triage", start=1, end=3, value="regression")
    assert not created and again.pk == span.pk and again.value == "regression"
    # Another range is another span, even overlapping.
    span_label_set(state=mine, schema="triage", start=2, end=2, value="decisive progress")
    assert SpanLabel.objects.filter(trajectory=trajectory).count() == 2
    span_label_delete(state=mine, span_id=span.pk)
    assert list(SpanLabel.objects.values_list("start_index", "end_index")) == [(2, 2)]
    events = list(
        SpanLabelEvent.objects.filter(trajectory_id=trajectory.pk)
        .order_by("pgh_id")
        .values_list("pgh_label", "value")
    )
    assert events == [
        ("insert", "useful exploration"),
        ("update", "regression"),
        ("insert", "decisive progress"),
        ("delete", "regression"),
    ]


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"start": 5}, "start", "Span start 5 is not a step of this trajectory (its steps are 0"),
        ({"end": 9}, "end", "Span end 9 is not a step"),
        ({"start": 3, "end": 1}, "end", "Span start 3 is after its end 1"),
        ({"value": "loop"}, "value", "Span value 'loop' is not one of 'triage''s values"),
        ({"schema": "patterns"}, "schema", "is not an active span schema of this project"),
    ],
)
def test_a_bad_span_is_refused_naming_the_field(
    owner: User, trajectory: Trajectory, triage: SpanSchema, change: dict, field: str, says: str
) -> None:
    asked = {"schema": "triage", "start": 0, "end": 1, "value": "regression", **change}
    with pytest.raises(LabelingError) as refused:
        span_label_set(state=state(owner, trajectory), **asked)
    assert refused.value.field == field
    assert says in refused.value.message
    assert not SpanLabel.objects.exists()


def test_an_annotator_labels_spans_only_with_a_lease(
    annotator: User, trajectory: Trajectory, triage: SpanSchema, queue: Queue
) -> None:
    with pytest.raises(NotAllowed):
        span_label_set(
            state=state(annotator, trajectory), schema="triage", start=0, end=1, value="regression"
        )
    span, _ = span_label_set(
        state=leased_state(annotator, queue), schema="triage", start=0, end=1, value="regression"
    )
    assert span.annotator == annotator


def test_nobody_removes_anothers_span(
    owner: User, researcher: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    span, _ = span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=1, value="regression"
    )
    with pytest.raises(NotAllowed) as refused:
        span_label_delete(state=state(researcher, trajectory), span_id=span.pk)
    assert refused.value.status == 404
    assert SpanLabel.objects.filter(pk=span.pk).exists()


# --- The panel ---------------------------------------------------------------------------


def test_the_panel_lists_spans_brackets_data_and_agreement(
    client: Client, owner: User, researcher: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=3, value="regression"
    )
    span_label_set(
        state=state(researcher, trajectory), schema="triage", start=2, end=3, value="regression"
    )
    client.force_login(owner)
    response = client.get(reverse("trajectory-spans", args=[trajectory.pk]), headers=HTMX)
    page = response.content.decode()
    assert response.status_code == 200
    assert page.count('class="span-item') == 2
    assert "steps 0\u20133" in page and "steps 2\u20133" in page
    assert "&quot;start&quot;: 2, &quot;end&quot;: 3" in page
    # IoU of regression: 2 shared steps of 4.
    assert 'id="span-agreement"' in page and "<td>regression</td><td>0.50</td>" in page


def test_the_panel_posts_a_span_and_refuses_a_bad_one(
    client: Client, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    client.force_login(owner)
    url = reverse("trajectory-spans", args=[trajectory.pk])
    posted = {"schema": triage.pk, "start": 1, "end": 4, "value": "useful exploration"}
    response = client.post(url, posted, headers=HTMX)
    assert response.status_code == 200
    assert "Saved: steps 1\u20134 · useful exploration" in response.content.decode()
    refused = client.post(url, {**posted, "value": "<b>loop</b>"}, headers=HTMX)
    assert refused.status_code == 400
    assert "&lt;b&gt;loop&lt;/b&gt;" in refused.content.decode()
    assert SpanLabel.objects.count() == 1


def test_blind_mode_hides_others_spans_until_submit(
    client: Client,
    project: Project,
    owner: User,
    annotator: User,
    trajectory: Trajectory,
    triage: SpanSchema,
    queue: Queue,
) -> None:
    project.settings = {"blind_labeling": True}
    project.save(update_fields=["settings"])
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=3, value="regression"
    )
    leased_state(annotator, queue)
    client.force_login(annotator)
    page = client.get(
        reverse("trajectory-spans", args=[trajectory.pk]) + f"?queue={queue.pk}", headers=HTMX
    ).content.decode()
    assert "regression</span>" not in page and 'id="span-empty"' in page
    api = client.get(reverse("api-trajectory-spans", args=[trajectory.pk])).json()
    assert api["spans"] == [] and api["agreement"] == {}


def test_without_a_span_schema_the_panel_is_hidden(
    client: Client, owner: User, trajectory: Trajectory
) -> None:
    client.force_login(owner)
    response = client.get(reverse("trajectory-spans", args=[trajectory.pk]), headers=HTMX)
    assert response.content.decode() == '<section class="spans" id="spans" hidden></section>'


# --- The API -----------------------------------------------------------------------------


def test_api_lists_creates_and_deletes_spans(
    client: Client, owner: User, researcher: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    url = reverse("api-trajectory-spans", args=[trajectory.pk])
    client.force_login(owner)
    body = {"schema": "triage", "start": 0, "end": 2, "value": "regression"}
    created = client.post(url, body, "application/json")
    assert created.status_code == 201, created.content
    span = created.json()
    assert (span["start"], span["end"], span["value"], span["annotator"]) == (
        0,
        2,
        "regression",
        "owner",
    )
    assert client.post(url, body, "application/json").status_code == 200
    client.force_login(researcher)
    client.post(url, {**body, "start": 1}, "application/json")
    listed = client.get(url).json()
    assert [(s["annotator"], s["start"]) for s in listed["spans"]] == [
        ("owner", 0),
        ("researcher", 1),
    ]
    assert listed["agreement"]["triage"]["iou"]["regression"] == pytest.approx(2 / 3)
    assert listed["agreement"]["triage"]["pairs"] == 1
    detail = reverse("api-span-detail", args=[span["id"]])
    assert client.get(detail).json()["value"] == "regression"
    # Not the researcher's: 404, and it stays.
    assert client.delete(detail).status_code == 404
    client.force_login(owner)
    assert client.delete(detail).status_code == 204
    assert client.get(detail).status_code == 404


def test_api_names_the_bad_field_and_refuses_unknown_ones(
    client: Client, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    url = reverse("api-trajectory-spans", args=[trajectory.pk])
    client.force_login(owner)
    bad = client.post(
        url, {"schema": "triage", "start": 3, "end": 1, "value": "regression"}, "application/json"
    )
    assert bad.status_code == 400 and "after its end" in bad.json()["end"]
    unknown = client.post(
        url,
        {"schema": "triage", "start": 0, "end": 1, "value": "regression", "colour": "x"},
        "application/json",
    )
    assert unknown.status_code == 400 and "colour" in unknown.content.decode()
    assert not SpanLabel.objects.exists()


def test_api_lists_sets_and_removes_final_spans(
    client: Client,
    owner: User,
    researcher: User,
    annotator: User,
    trajectory: Trajectory,
    triage: SpanSchema,
) -> None:
    span, _ = span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=2, value="regression"
    )
    url = reverse("api-trajectory-final-spans", args=[trajectory.pk])
    client.force_login(researcher)
    picked = client.post(url, {"pick": span.pk}, "application/json")
    assert picked.status_code == 201, picked.content
    assert (picked.json()["start"], picked.json()["end"], picked.json()["value"]) == (
        0,
        2,
        "regression",
    )
    assert picked.json()["adjudicator"] == "researcher"
    assert client.post(url, {"pick": span.pk}, "application/json").status_code == 200
    body = {"schema": "triage", "start": 0, "end": 2, "value": "useful exploration"}
    changed = client.post(url, body, "application/json")
    assert changed.status_code == 200 and changed.json()["id"] == picked.json()["id"]
    own = client.post(url, {**body, "schema": str(triage.pk), "start": 3}, "application/json")
    assert own.status_code == 400 and "after its end" in own.json()["end"]
    again = client.post(url, {**body, "start": 1, "end": 3}, "application/json")
    assert again.status_code == 201
    assert [(f["start"], f["value"]) for f in client.get(url).json()["final_spans"]] == [
        (0, "useful exploration"),
        (1, "useful exploration"),
    ]
    # Each change is in the history, marked as an adjudication by the researcher: the
    # pick, the new value, the second range (the same pick again changed nothing).
    events = FinalSpanEvent.objects.filter(
        pgh_context__action="adjudicate", pgh_context__user=researcher.pk
    )
    assert sorted(events.values_list("pgh_label", flat=True)) == ["insert", "insert", "update"]
    both = client.post(url, {**body, "pick": span.pk}, "application/json")
    assert both.status_code == 400 and "pick" in both.json()
    assert client.post(url, {"value": "x"}, "application/json").json().keys() == {
        "schema",
        "start",
        "end",
    }
    assert client.post(url, {**body, "colour": "x"}, "application/json").status_code == 400
    # The annotator reads them but may not set or remove one.
    detail = reverse("api-final-span-detail", args=[again.json()["id"]])
    client.force_login(annotator)
    assert len(client.get(url).json()["final_spans"]) == 2
    assert client.get(detail).json()["start"] == 1
    assert client.post(url, {"pick": span.pk}, "application/json").status_code == 403
    assert client.delete(detail).status_code == 403
    client.force_login(researcher)
    assert client.delete(detail).status_code == 204
    assert client.get(detail).status_code == 404
    assert FinalSpan.objects.count() == 1


def test_blind_mode_hides_final_spans_until_submit(
    client: Client,
    project: Project,
    owner: User,
    annotator: User,
    trajectory: Trajectory,
    triage: SpanSchema,
) -> None:
    project.settings = {"blind_labeling": True}
    project.save(update_fields=["settings"])
    final, _ = final_span_set(
        trajectory=trajectory, schema=triage, adjudicator=owner, start=0, end=1, value="regression"
    )
    client.force_login(annotator)
    url = reverse("api-trajectory-final-spans", args=[trajectory.pk])
    assert client.get(url).json() == {"final_spans": []}
    assert client.get(reverse("api-final-span-detail", args=[final.pk])).status_code == 404
    client.force_login(owner)
    assert [f["id"] for f in client.get(url).json()["final_spans"]] == [final.pk]


def test_outsiders_get_404(
    client: Client, owner: User, outsider: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    span, _ = span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=1, value="regression"
    )
    client.force_login(outsider)
    assert client.get(reverse("api-trajectory-spans", args=[trajectory.pk])).status_code == 404
    assert client.delete(reverse("api-span-detail", args=[span.pk])).status_code == 404
    final, _ = final_span_set(
        trajectory=trajectory, schema=triage, adjudicator=owner, start=0, end=1, value="regression"
    )
    finals = reverse("api-trajectory-final-spans", args=[trajectory.pk])
    assert client.get(finals).status_code == 404
    assert client.post(finals, {"pick": span.pk}, "application/json").status_code == 404
    assert client.get(reverse("api-final-span-detail", args=[final.pk])).status_code == 404
    assert client.delete(reverse("api-final-span-detail", args=[final.pk])).status_code == 404
    assert client.post(reverse("span-delete", args=[span.pk])).status_code == 404
    assert client.get(reverse("trajectory-spans", args=[trajectory.pk])).status_code == 404
    assert SpanLabel.objects.filter(pk=span.pk).exists()


# --- The export ----------------------------------------------------------------------------


def test_the_spans_export_writes_segments_and_per_step_values(
    owner: User, researcher: User, trajectory: Trajectory, triage: SpanSchema, tmp_path: Path
) -> None:
    other = trajectory_with_steps(trajectory.project, ["Alone."], external_id="no-spans")
    assert other.pk
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=2, value="regression"
    )
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=1, end=1, value="decisive progress"
    )
    span_label_set(
        state=state(researcher, trajectory), schema="triage", start=3, end=4, value="regression"
    )
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
    records = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]
    # The trajectory without spans is left out.
    assert [r["id"] for r in records] == ["apples"]
    (record,) = records
    assert record["step_count"] == 5
    assert record["segments"] == [
        {"schema": "triage", "start": 0, "end": 2, "value": "regression", "annotator": "owner"},
        {
            "schema": "triage",
            "start": 1,
            "end": 1,
            "value": "decisive progress",
            "annotator": "owner",
        },
        {
            "schema": "triage",
            "start": 3,
            "end": 4,
            "value": "regression",
            "annotator": "researcher",
        },
    ]
    assert record["step_values"] == {
        "triage": {
            "owner": [["regression"], ["decisive progress", "regression"], ["regression"], [], []],
            "researcher": [[], [], [], ["regression"], ["regression"]],
        }
    }
