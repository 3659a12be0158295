"""Template filters of the labeling pages: a schema value's name and colour, durations."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from labeling.models import LabelSchema

register = template.Library()

_UNKNOWN = {"name": "?", "color": "#6b7280", "key": "", "value": None, "error": False}


@register.filter
def entry_for(schema: LabelSchema | None, value: int | None) -> dict[str, Any]:
    """The schema's entry (name, colour, key) for ``value``; colours are checked hex."""
    if schema is None or value is None:
        return _UNKNOWN
    return schema.entry_for(value) or {**_UNKNOWN, "name": str(value), "value": value}


_BUTTON = (
    '<button type="submit" name="value" value="{}" class="label-button"'
    ' style="--label-color: {}" data-key="{}" aria-pressed="{}" title="{} ({})">'
    "{} <kbd>{}</kbd></button>"
)


@register.simple_tag
def label_buttons(schema: LabelSchema, value: int | None) -> SafeString:
    """A schema's value buttons on a step, ``value``'s pressed. Each button is escaped
    once per schema and request, in both states, and kept on the schema: the labeling
    page draws every schema's buttons on each of its 200 steps, and through template
    tags that cost grew with each schema the project labels under."""
    kept = schema.__dict__.get("_buttons")
    if kept is None or kept[0] is not schema.values:
        buttons = [
            (
                entry["value"],
                *(
                    format_html(
                        _BUTTON,
                        entry["value"],
                        entry["color"],
                        entry["key"],
                        pressed,
                        entry["name"],
                        entry["key"],
                        entry["name"],
                        entry["key"],
                    )
                    for pressed in ("false", "true")
                ),
            )
            for entry in schema.entries
        ]
        kept = (schema.values, buttons)
        schema.__dict__["_buttons"] = kept
    # Every part is format_html's escaped output, so the joined string is safe too.
    return mark_safe("\n".join(on if v == value else off for v, off, on in kept[1]))


_MORE_FORM = (
    '<form class="label-form label-form-more" method="post" action="{url}" data-schema="{name}"'
    ' hx-post="{url}" hx-target="#step-{step}" hx-swap="outerHTML">'
    '<input type="hidden" name="csrfmiddlewaretoken" value="{csrf}">'
    '<input type="hidden" name="schema" value="{schema}">{queue}'
    '<span class="label-form-schema">{name}</span>{buttons}</form>'
)


@register.simple_tag(takes_context=True)
def label_forms_more(context: template.Context, step: Any, url: str) -> SafeString:
    """The forms of a step's schemas after the first (``step.label_forms``): their
    buttons only, the first schema's form holding the step's other actions. Drawn here
    rather than by template tags so that each schema a project adds costs the labeling
    page's 200 steps a few string joins, not a template's worth of tags."""
    forms = [form for form in step.label_forms if not form.first]
    if not forms:
        return mark_safe("")
    csrf = str(context.get("csrf_token", ""))
    queue_id = context.get("queue_id")
    queue = (
        format_html('<input type="hidden" name="queue" value="{}">', queue_id) if queue_id else ""
    )
    return mark_safe(
        "".join(
            format_html(
                _MORE_FORM,
                url=url,
                name=form.schema.name,
                step=step.pk,
                csrf=csrf,
                schema=form.schema.pk,
                queue=queue,
                buttons=label_buttons(form.schema, form.label.value if form.label else None),
            )
            for form in forms
        )
    )


@register.filter
def value_name(schema: LabelSchema | None, value: int | None) -> str:
    return str(entry_for(schema, value)["name"])


@register.filter
def minutes_left(moment: dt.datetime | None) -> int:
    if moment is None:
        return 0
    return max(0, int((moment - timezone.now()).total_seconds() // 60))


@register.filter
def percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0
