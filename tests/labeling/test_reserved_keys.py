"""Schema values may not take the labeling page's own keys: the one Python list
(``labeling.models.RESERVED_KEYS``) against the keys the page's script binds, and the
refusal on every way a schema is saved (the schema page, the service, the admin's
model check)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from labeling.models import RESERVED_KEYS, LabelSchema, reserved_key_error
from labeling.services import LabelingError, label_schema_save
from tests.labeling.test_views import schema_post

LABELING_JS = Path(settings.BASE_DIR) / "static" / "stepscope" / "labeling.js"


def bound_keys(script: str) -> set[str]:
    """The single-character keys the page's keydown handler compares ``key`` with
    (``if (key === "j") ...``); named keys (Enter, Escape) are not a schema key's."""
    start = script.index('document.addEventListener("keydown"')
    handler = script[start : script.index("});", start)]
    return set(re.findall(r'\bkey === "(.)"', handler))


def test_reserved_keys_are_exactly_the_keys_labeling_js_binds() -> None:
    bound = bound_keys(LABELING_JS.read_text(encoding="utf-8"))
    # The handler is found and holds the shortcuts the page documents.
    assert {"j", "k", "d", "f", "n"} <= bound
    assert set(RESERVED_KEYS) == bound
    assert len(RESERVED_KEYS) == len(set(RESERVED_KEYS))


def test_the_reader_of_the_script_sees_a_new_binding() -> None:
    script = LABELING_JS.read_text(encoding="utf-8")
    added = script.replace('if (key === "j")', 'if (key === "q") x();\n    else if (key === "j")')
    assert bound_keys(added) == set(RESERVED_KEYS) | {"q"}


@pytest.mark.parametrize("key", ["d", "D", "n", "?", "j"])
def test_reserved_key_error_names_the_key_and_what_it_does(key: str) -> None:
    problem = reserved_key_error(key)
    assert problem is not None
    assert f"key {key!r} is a labeling shortcut" in problem
    assert reserved_key_error("7") is None


def test_service_refuses_a_value_on_the_decisive_key(schema: LabelSchema) -> None:
    values = [dict(v) for v in schema.values]
    values[2]["key"] = "d"
    with pytest.raises(LabelingError) as refused:
        label_schema_save(
            schema=schema,
            kind=schema.kind,
            values=values,
            error_tags=schema.error_tags,
            ask_rationale=False,
            first_error_mode=False,
        )
    assert refused.value.field == "values"
    assert "values.2 (good): key 'd' is a labeling shortcut (decisive failure)" in (
        refused.value.message
    )
    # Nothing was saved: still the one version with its own keys.
    assert list(LabelSchema.objects.filter(project=schema.project).values_list("version")) == [(1,)]
    assert LabelSchema.objects.get(pk=schema.pk).values[2]["key"] == "3"


def test_schema_page_refuses_the_decisive_key_and_keeps_the_schema(
    client: Client, owner: User, schema: LabelSchema
) -> None:
    client.force_login(owner)
    url = reverse("schema-edit", args=[schema.project.slug])
    refused = client.post(url, schema_post(schema, **{"values-1-key": "d"}))
    assert refused.status_code == 200
    text = refused.content.decode()
    assert "Key &#x27;d&#x27; is a labeling shortcut (decisive failure)" in text
    assert LabelSchema.objects.get(pk=schema.pk).values[1]["key"] == "2"
    assert LabelSchema.objects.filter(project=schema.project).count() == 1


def test_admin_model_check_refuses_a_reserved_key(schema: LabelSchema) -> None:
    schema.values = [dict(v) for v in schema.values]
    schema.values[0]["key"] = "N"
    with pytest.raises(ValidationError) as refused:
        schema.full_clean()
    assert "key 'N' is a labeling shortcut (next queue item)" in str(refused.value)
