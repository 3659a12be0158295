"""Several label schemas at once in a project: each has its keys (a clash is refused when
a schema is saved), may apply to some steps only, and gets its own buttons on the
labeling surface; a label keypress costs the same queries whatever the number of
schemas."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from labeling.models import LabelSchema, SpanLabel, StepLabel, TrajectoryLabel
from labeling.services import LabelingError, label_schema_create, label_schema_save, step_label_set
from labeling.services.bulk import step_labels_set
from labeling.services.rubrics import rubric_save
from labeling.services.spans import span_schema_save
from tests.labeling.conftest import state, step_at
from trajectories.models import Project, Step, Trajectory

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
ERROR_TYPE = [
    {"value": 1, "name": "math", "key": "4"},
    {"value": 2, "name": "logic", "key": "5"},
    {"value": 3, "name": "tool", "key": "6"},
]
SEVERITY = [
    {"value": 1, "name": "minor", "key": "7"},
    {"value": 2, "name": "major", "key": "8"},
    {"value": 3, "name": "critical", "key": "9"},
]
PROGRESS = [{"value": v, "name": f"p{v}", "key": k} for v, k in ((0, "z"), (1, "x"), (2, "y"))]


# A label keypress on the trajectory page (HTMX, one row back): the session and the user,
# the step and its trajectory with the labeling state, the label and the verdict upserts
# (inside a savepoint here, BEGIN/COMMIT outside a test), the trajectory again, the step's
# row and its labels.
KEYPRESS_QUERIES = 11


def add_schemas(project: Project) -> list[LabelSchema]:
    return [
        label_schema_create(
            project=project, name="error_type", kind="categorical", values=ERROR_TYPE
        ),
        label_schema_create(project=project, name="severity", kind="ordinal", values=SEVERITY),
        label_schema_create(project=project, name="progress", kind="ordinal", values=PROGRESS),
    ]


def keypress(client: Client, step: Step, schema: LabelSchema, value: int) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.post(
            reverse("step-label", args=[step.pk]),
            {"schema": schema.pk, "value": value},
            headers=HTMX,
        )
    assert response.status_code == 200, response.content
    return response, len(queries.captured_queries)


def test_a_keypress_costs_the_same_queries_with_four_schemas_as_with_one(
    client: Client, owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    client.force_login(owner)
    _, one = keypress(client, step_at(trajectory, 0), schema, 1)
    _, severity, _ = add_schemas(project)
    response, four = keypress(client, step_at(trajectory, 1), schema, 1)
    assert four == one
    # The row that comes back has each schema's buttons, its keys and this user's labels.
    html = response.content.decode()
    for name in ("step quality", "error_type", "severity", "progress"):
        assert f'data-schema="{name}"' in html
    _, other = keypress(client, step_at(trajectory, 1), severity, 3)
    assert other == one
    # A span schema with a span and a rubric beside the label schemas change nothing.
    span_schema = span_schema_save(project=project, name="triage")
    SpanLabel.objects.create(
        trajectory=trajectory,
        schema=span_schema,
        annotator=owner,
        start_index=0,
        end_index=1,
        value=span_schema.values[0]["value"],
    )
    rubric_save(project=project, user_id=owner.pk, criteria=[{"text": "Checks units"}])
    _, with_span_and_rubric = keypress(client, step_at(trajectory, 2), schema, 1)
    assert with_span_and_rubric == one
    # The count itself, so that a query added to every keypress is a decision, not drift.
    assert one == KEYPRESS_QUERIES
    mine = dict(
        StepLabel.objects.filter(step=step_at(trajectory, 1)).values_list("schema__name", "value")
    )
    assert mine == {"step quality": 1, "severity": 3}


def test_keys_that_clash_with_another_schema_are_refused_at_save(
    project: Project, schema: LabelSchema
) -> None:
    with pytest.raises(LabelingError) as clash:
        label_schema_create(
            project=project,
            name="severity",
            kind="ordinal",
            values=[{"value": 1, "name": "minor", "key": "3"}],
        )
    assert clash.value.field == "values"
    assert "key '3' labels 'step quality' already" in clash.value.message
    (severity,) = [
        label_schema_create(project=project, name="severity", kind="ordinal", values=SEVERITY)
    ]
    with pytest.raises(LabelingError, match="key '7' labels 'severity' already"):
        label_schema_save(
            schema=schema,
            kind=schema.kind,
            values=[*schema.values[:2], {"value": 1, "name": "good", "key": "7"}],
            error_tags=schema.error_tags,
            ask_rationale=False,
            first_error_mode=False,
        )
    # A new version of one schema leaves the others active.
    newer = label_schema_save(
        schema=severity,
        kind="ordinal",
        values=[*SEVERITY[:2], {"value": 4, "name": "fatal", "key": "9"}],
        error_tags=[],
        ask_rationale=False,
        first_error_mode=False,
    )
    assert newer.version == 2
    active = set(LabelSchema.objects.filter(is_active=True).values_list("name", "version"))
    assert active == {("step quality", 1), ("severity", 2)}
    for name in ("", "a/b"):
        with pytest.raises(LabelingError, match="without a slash"):
            label_schema_create(project=project, name=name, kind="ordinal", values=[])
    with pytest.raises(LabelingError, match="has a schema named 'severity' already"):
        label_schema_create(project=project, name="severity", kind="ordinal", values=[])


def test_a_schema_applies_to_the_steps_it_names(
    client: Client, owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    Step.objects.filter(trajectory=trajectory, index=4).update(kind="answer")
    with pytest.raises(LabelingError, match=r"applies_to.kinds: essay is no step kind"):
        label_schema_create(
            project=project,
            name="progress",
            kind="ordinal",
            values=PROGRESS,
            applies_to={"kinds": ["essay"]},
        )
    progress = label_schema_create(
        project=project,
        name="progress",
        kind="ordinal",
        values=PROGRESS,
        applies_to={"kinds": ["answer"]},
    )
    with pytest.raises(LabelingError, match="does not ask about step 0") as refused:
        step_label_set(
            state=state(owner, trajectory),
            step=step_at(trajectory, 0),
            schema_id=progress.pk,
            value=1,
        )
    assert refused.value.field == "schema"
    step_label_set(
        state=state(owner, trajectory), step=step_at(trajectory, 4), schema_id=progress.pk, value=2
    )
    client.force_login(owner)
    html = client.get(reverse("trajectory-detail", args=[trajectory.pk])).content.decode()
    # The progress buttons are on the answer step only; every step has the first schema's.
    assert html.count('data-schema="progress"') == 1
    assert html.count('data-schema="step quality"') == 5


def test_the_schema_page_edits_each_schema_and_adds_one(
    client: Client, owner: User, project: Project, schema: LabelSchema
) -> None:
    """A tab per schema; the form saves the schema its tab names (not the newest); an
    admin adds a schema, whose values start without keys; an unknown tab is a 404."""
    error_type, severity, _ = add_schemas(project)
    client.force_login(owner)
    url = reverse("schema-edit", args=[project.slug])
    page = client.get(url, {"schema": "error_type"})
    text = page.content.decode()
    assert page.status_code == 200
    assert text.count('aria-current="page"') == 1 and ">error_type</a>" in text
    assert [v.pk for v in page.context["versions"]] == [error_type.pk]

    values = [{**entry, "color": "#123456", "error": ""} for entry in ERROR_TYPE]
    form: dict[str, Any] = {"form": "schema", "schema": "error_type", "kind": "categorical"}
    form["error_tags"] = ""
    form |= {"values-TOTAL_FORMS": "3", "values-INITIAL_FORMS": "3"}
    for n, entry in enumerate(values):
        form |= {f"values-{n}-{key}": value for key, value in entry.items()}
    form["values-0-name"] = "arithmetic"
    saved = client.post(url, form)
    assert saved.status_code == 302 and saved["Location"].endswith("?schema=error_type")
    newest = LabelSchema.objects.get(project=project, name="error_type", is_active=True)
    assert newest.entries[0]["name"] == "arithmetic"
    severity.refresh_from_db()
    assert severity.is_active and severity.version == 1  # the other schemas untouched

    added = client.post(url, {"form": "add", "name": "safety", "kind": "binary"})
    assert added.status_code == 302 and added["Location"].endswith("?schema=safety")
    safety = LabelSchema.objects.get(project=project, name="safety")
    assert [entry["key"] for entry in safety.entries] == ["", ""]
    clash = client.post(url, {"form": "add", "name": "safety", "kind": "binary"})
    assert clash.status_code == 200 and "safety" in clash.context["add_form"].errors["name"][0]
    assert client.get(url, {"schema": "nope"}).status_code == 404


def test_a_schema_without_an_error_value_leaves_the_first_error_as_it_was(
    owner: User, project: Project, trajectory: Trajectory, schema: LabelSchema
) -> None:
    _, severity, _ = add_schemas(project)
    assert schema.error_value is not None and severity.error_value is None

    def first_error() -> int | None:
        verdict = TrajectoryLabel.objects.get(trajectory=trajectory, annotator=owner)
        return verdict.first_error_index

    step_label_set(
        state=state(owner, trajectory),
        step=step_at(trajectory, 1),
        schema_id=schema.pk,
        value=schema.error_value,
    )
    assert first_error() == 1
    # A severity on a later step (one by one, then in one batch with a quality label).
    step_label_set(
        state=state(owner, trajectory), step=step_at(trajectory, 2), schema_id=severity.pk, value=3
    )
    assert first_error() == 1
    step_labels_set(
        user=owner,
        items=[
            {"step": step_at(trajectory, 0).pk, "schema": schema.pk, "value": schema.error_value},
            {"step": step_at(trajectory, 3).pk, "schema": severity.pk, "value": 2},
        ],
    )
    assert first_error() == 0
