"""Key ``u`` undoes the annotator's latest span change when it is newer than their latest
step label change: a new span goes, a changed value comes back, a removed span returns;
repeated undos walk back; the step label undo still works after."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import SpanLabel, SpanSchema, StepLabel
from labeling.services import (
    LabelingError,
    span_label_delete,
    span_label_set,
    span_label_undo,
    span_schema_save,
    span_undo_is_next,
    step_label_set,
)
from tests.labeling.conftest import state, step_at
from trajectories.models import Project, Trajectory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def triage(project: Project) -> SpanSchema:
    return span_schema_save(project=project, name="triage")


def _spans(trajectory: Trajectory) -> list[tuple[int, int, str]]:
    return list(
        SpanLabel.objects.filter(trajectory=trajectory)
        .order_by("start_index")
        .values_list("start_index", "end_index", "value")
    )


def test_undos_walk_back_through_span_changes(
    owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    mine = state(owner, trajectory)
    span, _ = span_label_set(state=mine, schema="triage", start=0, end=1, value="regression")
    span_label_set(state=mine, schema="triage", start=0, end=1, value="decisive progress")
    span_label_set(state=mine, schema="triage", start=2, end=3, value="regression")
    span_label_delete(state=mine, span_id=span.pk)
    assert _spans(trajectory) == [(2, 3, "regression")]
    # The removal comes back, then the new span goes, then the change is taken back.
    assert span_label_undo(state=mine) == (0, 1)
    assert _spans(trajectory) == [(0, 1, "decisive progress"), (2, 3, "regression")]
    assert span_label_undo(state=mine) == (2, 3)
    assert _spans(trajectory) == [(0, 1, "decisive progress")]
    assert span_label_undo(state=mine) == (0, 1)
    assert _spans(trajectory) == [(0, 1, "regression")]
    assert span_label_undo(state=mine) == (0, 1)
    assert _spans(trajectory) == []
    with pytest.raises(LabelingError, match="No span change to undo"):
        span_label_undo(state=mine)


@pytest.mark.django_db(transaction=True)
def test_u_undoes_whichever_change_came_last(
    client: Client, owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    mine = state(owner, trajectory)
    step_label_set(state=mine, step=step_at(trajectory, 0), value=1)
    span_label_set(state=mine, schema="triage", start=1, end=2, value="regression")
    assert span_undo_is_next(mine)
    client.force_login(owner)
    url = reverse("label-undo", args=[trajectory.pk])
    response = client.post(url, headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Retarget"] == "#spans"
    assert "Undone: steps 1\u20132." in response.content.decode()
    assert _spans(trajectory) == []
    assert StepLabel.objects.filter(step__trajectory=trajectory).count() == 1
    # The next u is the step label's.
    assert not span_undo_is_next(mine)
    response = client.post(url, headers=HTMX)
    assert response["HX-Retarget"] == f"#step-{step_at(trajectory, 0).pk}"
    assert not StepLabel.objects.filter(step__trajectory=trajectory).exists()


# History rows carry their transaction's time: these tests commit each write, as requests do.
@pytest.mark.django_db(transaction=True)
def test_a_step_label_after_a_span_is_undone_first(
    owner: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    mine = state(owner, trajectory)
    span_label_set(state=mine, schema="triage", start=1, end=2, value="regression")
    step_label_set(state=mine, step=step_at(trajectory, 0), value=1)
    assert not span_undo_is_next(mine)


def test_another_annotators_spans_are_not_undone(
    owner: User, researcher: User, trajectory: Trajectory, triage: SpanSchema
) -> None:
    span_label_set(
        state=state(researcher, trajectory), schema="triage", start=0, end=1, value="regression"
    )
    assert not span_undo_is_next(state(owner, trajectory))
    with pytest.raises(LabelingError, match="No span change to undo"):
        span_label_undo(state=state(owner, trajectory))
    assert _spans(trajectory) == [(0, 1, "regression")]
