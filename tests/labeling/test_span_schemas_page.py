"""The span schemas page: members read the project's span schemas, admins add and edit
them (values one a line), refusals name the field, and a key a step schema also uses is
noted."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from labeling.models import SpanSchema
from labeling.services import span_label_set, span_schema_save
from labeling.spans import TRIAGE_VALUES
from tests.labeling.conftest import state
from trajectories.models import Project, Trajectory

pytestmark = pytest.mark.django_db


def _page(project: Project) -> str:
    return reverse("span-schemas", args=[project.slug])


def test_an_admin_adds_a_span_schema_with_values_and_keys(
    client: Client, owner: User, project: Project
) -> None:
    client.force_login(owner)
    response = client.post(
        _page(project),
        {"name": "patterns", "values": "loop | 7 | #ff0000\nrecovered | 8\n\n", "is_active": "on"},
    )
    assert response.status_code == 302
    saved = SpanSchema.objects.get(project=project, name="patterns")
    assert saved.values == [
        {"value": "loop", "key": "7", "color": "#ff0000"},
        {"value": "recovered", "key": "8"},
    ]
    page = client.get(_page(project)).content.decode()
    assert "patterns" in page and "recovered" in page


def test_an_admin_edits_a_span_schema_and_its_name_stays(
    client: Client, owner: User, project: Project
) -> None:
    span_schema_save(project=project, name="triage")
    client.force_login(owner)
    form = client.get(_page(project), {"schema": "triage"}).content.decode()
    assert "decisive progress | 1 | #2f9e44" in form
    lines = "\n".join(f"{v['value']} | {v['key']}" for v in TRIAGE_VALUES) + "\nloop | 9"
    response = client.post(
        _page(project),
        {"schema": "triage", "name": "renamed", "values": lines, "is_active": "on"},
    )
    assert response.status_code == 302
    schema = SpanSchema.objects.get(project=project)
    assert schema.name == "triage"
    assert schema.entry_for("loop") == {"value": "loop", "key": "9", "color": "#6b7280"}


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ("loop | j", "key &#x27;j&#x27; is a labeling shortcut"),
        ("loop | 5 | red", "color is a #hex colour"),
        ("a | b | c | d", "Line 1: at most three parts"),
        ("loop | 1", "key &#x27;1&#x27; labels span schema &#x27;triage&#x27;"),
    ],
)
def test_bad_values_are_refused_naming_the_value(
    client: Client, owner: User, project: Project, values: str, says: str
) -> None:
    span_schema_save(project=project, name="triage")
    client.force_login(owner)
    response = client.post(
        _page(project), {"name": "patterns", "values": values, "is_active": "on"}
    )
    assert response.status_code == 200
    assert says in response.content.decode()
    assert not SpanSchema.objects.filter(name="patterns").exists()


def test_a_second_schema_of_the_same_name_is_refused(
    client: Client, owner: User, project: Project
) -> None:
    span_schema_save(project=project, name="triage")
    client.force_login(owner)
    response = client.post(_page(project), {"name": "triage", "values": "loop | 9"})
    assert "has a span schema named" in response.content.decode()
    assert SpanSchema.objects.get(project=project).entry_for("loop") is None


def test_a_value_spans_carry_cannot_be_taken_away_here(
    client: Client, owner: User, project: Project, trajectory: Trajectory
) -> None:
    span_schema_save(project=project, name="triage")
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=1, value="regression"
    )
    client.force_login(owner)
    response = client.post(
        _page(project), {"schema": "triage", "values": "decisive progress | 1", "is_active": "on"}
    )
    assert "spans carry regression" in response.content.decode()


def test_a_key_a_step_schema_uses_is_noted(
    client: Client, owner: User, project: Project, trajectory: Trajectory
) -> None:
    # The default step schema labels with 1 / 2 / 3 (trajectory's fixture makes it).
    step_keys = {e["key"] for e in project.label_schemas.get(is_active=True).entries}
    span_schema_save(project=project, name="triage")
    client.force_login(owner)
    page = client.get(_page(project)).content.decode()
    clashing = sorted(step_keys & {v["key"] for v in TRIAGE_VALUES})
    assert clashing, "the fixture's step schema shares a key with the TRIAGE roles"
    assert page.count('class="notice small key-clash"') == len(clashing)
    assert f"Key &#x27;{clashing[0]}&#x27;" in page and "also labels the step schema" in page


def test_an_annotator_reads_but_may_not_edit(
    client: Client, annotator: User, project: Project
) -> None:
    span_schema_save(project=project, name="triage")
    client.force_login(annotator)
    page = client.get(_page(project)).content.decode()
    assert "triage" in page and 'id="span-schema-form"' not in page
    response = client.post(_page(project), {"name": "patterns", "values": "loop"})
    assert response.status_code == 403
    assert not SpanSchema.objects.filter(name="patterns").exists()


def test_an_unknown_schema_name_is_a_404(client: Client, owner: User, project: Project) -> None:
    client.force_login(owner)
    assert client.get(_page(project), {"schema": "nope"}).status_code == 404


def test_the_django_admin_lists_span_schemas_and_checks_their_values(
    client: Client, project: Project, owner: User, trajectory: Trajectory
) -> None:
    schema = span_schema_save(project=project, name="triage")
    span_label_set(
        state=state(owner, trajectory), schema="triage", start=0, end=1, value="regression"
    )
    staff = User.objects.create_superuser("staff", password="x")
    client.force_login(staff)
    listed = client.get(reverse("admin:labeling_spanschema_changelist")).content.decode()
    assert "triage" in listed and project.name in listed
    url = reverse("admin:labeling_spanschema_change", args=[schema.pk])
    assert client.get(url).status_code == 200
    form = {"project": project.pk, "name": "triage", "is_active": "on"}
    bad = client.post(url, {**form, "values": '[{"value": "regression", "key": "j"}]'})
    assert bad.status_code == 200 and "labeling shortcut" in bad.content.decode()
    # Taking away a value a span carries is refused, as on the span schema page.
    kept = [v for v in TRIAGE_VALUES if v["value"] != "regression"]
    used = client.post(url, {**form, "values": json.dumps(kept)})
    assert "Spans carry regression" in used.content.decode()
    assert len(SpanSchema.objects.get(pk=schema.pk).values) == 4
    renamed = [{**v, "value": v["value"].title()} for v in TRIAGE_VALUES]
    renamed[3]["value"] = "regression"
    saved = client.post(url, {**form, "values": json.dumps(renamed)})
    assert saved.status_code == 302
    assert SpanSchema.objects.get(pk=schema.pk).values[0]["value"] == "Decisive Progress"
    assert client.get(reverse("admin:labeling_spanlabel_changelist")).status_code == 200
    assert client.get(reverse("admin:labeling_finalspan_changelist")).status_code == 200
