"""Forms for labeling: the step label post (partial: only the fields sent change), the
trajectory verdict, queue creation and the schema editor."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.http import QueryDict

from labeling.models import LabelSchema, Queue, TrajectoryLabel, reserved_key_error
from labeling.spans import SpanSchema
from trajectories.forms import TrajectoryFilterForm
from trajectories.models import Project


class StepLabelForm(forms.Form):
    """One label post. A field that is absent keeps what is stored, so the label buttons
    send only ``value`` and the editor sends tags, rationale and correction. The editor
    sends ``tags_sent`` so that unticking every tag clears them."""

    value = forms.IntegerField(required=False)
    first_error = forms.BooleanField(required=False)
    schema = forms.IntegerField(required=False, min_value=1)
    tags_sent = forms.BooleanField(required=False)
    rationale = forms.CharField(required=False, strip=True)
    correction = forms.CharField(required=False, strip=False)
    time_spent_ms = forms.IntegerField(required=False, min_value=0)

    def service_kwargs(self) -> dict[str, Any]:
        data = self.cleaned_data
        kwargs: dict[str, Any] = {
            "schema_id": data.get("schema"),
            "value": data.get("value"),
            "first_error": bool(data.get("first_error")),
            "time_spent_ms": data.get("time_spent_ms"),
        }
        # Tags are checked against the schema by the service, which names an unknown one.
        if data.get("tags_sent") or "tags" in self.data:
            data_tags = self.data.getlist("tags") if isinstance(self.data, QueryDict) else []
            kwargs["tags"] = [str(t) for t in data_tags]
        for name in ("rationale", "correction"):
            if name in self.data:
                kwargs[name] = data.get(name) or ""
        return kwargs


class VerdictForm(forms.Form):
    outcome = forms.ChoiceField(
        required=False, choices=[("", "—"), *TrajectoryLabel.Outcome.choices]
    )
    finish_reason = forms.ChoiceField(
        required=False,
        choices=[("", "automatic"), *TrajectoryLabel.FinishReason.choices],
        help_text="Automatic: found error when a step is marked as the first error, else solution.",
    )
    comment = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    flagged = forms.BooleanField(required=False, label="Flag: bad problem")


class DecisiveForm(forms.Form):
    """The decisive failure: which agent, at which step, decided that the run failed."""

    agent = forms.CharField(required=False, max_length=200)
    step = forms.IntegerField(required=False, min_value=0)
    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))


class QueueForm(TrajectoryFilterForm):
    """A queue: its name and rules, and the trajectory filters that select its items."""

    name = forms.CharField(max_length=200)
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    overlap = forms.IntegerField(
        min_value=1, max_value=20, initial=1, help_text="Annotators per trajectory."
    )
    lease_minutes = forms.IntegerField(min_value=1, max_value=7 * 24 * 60, initial=30)
    order = forms.ChoiceField(
        choices=Queue.Order.choices,
        initial=Queue.Order.POSITION,
        required=False,
        help_text="Most uncertain first: trajectories whose unlabelled steps the latest"
        " trained head scores nearest 0.5 come first.",
    )
    assignees = forms.ModelMultipleChoiceField(
        queryset=User.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Nobody ticked: every member may take items.",
    )
    limit = forms.IntegerField(required=False, min_value=1, label="At most")
    schemas = forms.MultipleChoiceField(
        choices=[],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Label schemas",
        help_text="Nothing ticked: every active schema.",
    )
    span_schemas = forms.MultipleChoiceField(
        choices=[],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Span schemas",
        help_text="Runs of steps to label; nothing ticked: none asked for.",
    )

    field_order = [
        "name",
        "description",
        "overlap",
        "lease_minutes",
        "order",
        "assignees",
        "schemas",
        "span_schemas",
    ]

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.project = project
        assignees = self.fields["assignees"]
        assert isinstance(assignees, forms.ModelMultipleChoiceField)
        assignees.queryset = User.objects.filter(memberships__project=project).order_by("username")
        # The queue asks for some of the project's active step schemas, or all of them.
        schemas = self.fields["schemas"]
        assert isinstance(schemas, forms.MultipleChoiceField)
        names = LabelSchema.objects.filter(project=project, is_active=True).order_by("id")
        schemas.choices = [(n, n) for n in dict.fromkeys(names.values_list("name", flat=True))]
        spans = self.fields["span_schemas"]
        assert isinstance(spans, forms.MultipleChoiceField)
        active = SpanSchema.objects.filter(project=project, is_active=True).order_by("id")
        spans.choices = [(n, n) for n in active.values_list("name", flat=True)]
        self.fields["after"].disabled = True

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].strip()
        if Queue.objects.filter(project=self.project, name=name).exists():
            raise ValidationError("A queue with this name exists already.")
        return name


_HEX = re.compile(r"#[0-9a-fA-F]{6}")


class SchemaValueForm(forms.Form):
    value = forms.IntegerField()
    name = forms.CharField(max_length=40)
    key = forms.CharField(max_length=1)
    color = forms.CharField(
        max_length=7, initial="#6b7280", widget=forms.TextInput({"type": "color"})
    )
    error = forms.BooleanField(required=False, label="Error value")

    def clean_key(self) -> str:
        key: str = self.cleaned_data["key"]
        problem = reserved_key_error(key)
        if problem is not None:
            raise ValidationError(problem[0].upper() + problem[1:] + ".")
        return key

    def clean_color(self) -> str:
        color: str = self.cleaned_data["color"]
        if not _HEX.fullmatch(color):
            raise ValidationError("Use a colour like #2f9e44.")
        return color


class BaseSchemaValueFormSet(forms.BaseFormSet):
    kind: str = LabelSchema.Kind.TERNARY

    def clean(self) -> None:
        if any(self.errors):
            return
        rows = [
            f.cleaned_data
            for f in self.forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE")
        ]
        values = [r["value"] for r in rows]
        keys = [r["key"] for r in rows]
        if len(set(values)) != len(values):
            raise ValidationError("Each value may appear once.")
        if len(set(keys)) != len(keys):
            raise ValidationError("Each key may be used once.")
        if sum(1 for r in rows if r.get("error")) > 1:
            raise ValidationError("At most one value is the error value.")
        if self.kind == LabelSchema.Kind.TERNARY and set(values) != {-1, 0, 1}:
            raise ValidationError("A ternary schema has the values -1, 0 and 1.")
        if self.kind == LabelSchema.Kind.BINARY and len(values) != 2:
            raise ValidationError("A binary schema has two values.")
        if (
            self.kind in (LabelSchema.Kind.ORDINAL, LabelSchema.Kind.CATEGORICAL)
            and len(values) < 2
        ):
            raise ValidationError("A schema needs at least two values.")

    def schema_values(self) -> list[dict[str, Any]]:
        rows = [
            f.cleaned_data
            for f in self.forms
            if f.cleaned_data and not f.cleaned_data.get("DELETE")
        ]
        values = []
        for row in sorted(rows, key=lambda r: r["value"]):
            entry = {k: row[k] for k in ("value", "name", "key", "color")}
            if row.get("error"):
                entry["error"] = True
            values.append(entry)
        return values


SchemaValueFormSet = forms.formset_factory(
    SchemaValueForm, formset=BaseSchemaValueFormSet, extra=1, can_delete=True
)


class SchemaAddForm(forms.Form):
    """A new label dimension beside the project's others (the schema page)."""

    name = forms.CharField(max_length=100, help_text="e.g. severity, tool choice, safety")
    kind = forms.ChoiceField(
        choices=[
            (LabelSchema.Kind.TERNARY, "ternary: bad, neutral, good"),
            (LabelSchema.Kind.BINARY, "binary: incorrect, correct"),
        ],
        help_text="Its values start without keys; give them keys the other schemas do not use.",
    )


class SchemaForm(forms.Form):
    kind = forms.ChoiceField(choices=LabelSchema.Kind.choices)
    error_tags = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="One tag per line (the error taxonomy annotators pick from).",
    )
    ask_rationale = forms.BooleanField(required=False, label="Ask for a rationale")
    first_error_mode = forms.BooleanField(
        required=False,
        label="First-error mode",
        help_text="Steps after the first step labelled as an error are not asked for.",
    )

    def clean_error_tags(self) -> list[str]:
        tags: list[str] = []
        for line in self.cleaned_data["error_tags"].splitlines():
            tag = line.strip()
            if tag and tag not in tags:
                tags.append(tag[:60])
        return tags


class GuidelinesForm(forms.Form):
    guidelines = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 10}),
        help_text="Markdown, shown to annotators on the labeling page (key g).",
    )


class LabelingSettingsForm(forms.Form):
    blind_labeling = forms.BooleanField(
        required=False,
        label="Blind labeling",
        help_text="Annotators see other annotators' labels only after submitting a trajectory.",
    )
    hide_model_scores = forms.BooleanField(
        required=False,
        label="Hide model scores",
        help_text="Annotators see model scores only after submitting a trajectory.",
    )
    labels_per_step = forms.IntegerField(
        min_value=1, max_value=20, label="Labels per step", help_text="Default queue overlap."
    )


class SpanSchemaForm(forms.Form):
    """A span schema on its page: a name, and its values one a line as ``value | key |
    #colour`` (key and colour may be left out). The service checks the values, so every
    way a span schema is saved refuses the same things with the same words."""

    name = forms.CharField(max_length=100, help_text="e.g. segment role, loop")
    values = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}),
        help_text="One value a line: value | key | #colour (key and colour optional).",
    )
    is_active = forms.BooleanField(required=False, initial=True, label="Active")

    def clean_values(self) -> list[dict[str, str]]:
        entries: list[dict[str, str]] = []
        for number, line in enumerate(self.cleaned_data["values"].splitlines(), start=1):
            if not line.strip():
                continue
            parts = [part.strip() for part in line.split("|")]
            if len(parts) > 3:
                raise ValidationError(
                    f"Line {number}: at most three parts (value | key | #colour), not {line!r}."
                )
            entry = {"value": parts[0]}
            if len(parts) > 1 and parts[1]:
                entry["key"] = parts[1]
            if len(parts) > 2 and parts[2]:
                entry["color"] = parts[2]
            entries.append(entry)
        if not entries:
            raise ValidationError("Give at least one value.")
        return entries


def span_values_text(values: list[dict[str, str]]) -> str:
    """A span schema's values as the form's lines (the inverse of its ``clean_values``)."""
    return "\n".join(
        " | ".join([e["value"], e.get("key", ""), e.get("color", "")]).rstrip(" |") for e in values
    )
