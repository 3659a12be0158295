"""The rule and webhook forms. A rule's selection is written as the trajectory list's
query string (``outcome=failure&min_steps=5``): the same names, parsed by the one
selection parser, a name it does not know refused with the list of names."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.db.models import Q
from django.http import QueryDict

from automation.models import Rule, Webhook
from labeling.models import Queue
from scoring.models import Scorer
from stepscope.events import EVENT_KINDS
from trajectories.models import Project
from trajectories.selection import SelectionError, TrajectoryFilters, selection_parse


class RuleForm(forms.Form):
    name = forms.CharField(max_length=200)
    selection = forms.CharField(
        required=False,
        max_length=4000,
        label="Selection",
        help_text="The trajectory list's filters as its query string, e.g."
        " outcome=failure&min_steps=5; empty: every trajectory.",
        widget=forms.TextInput(attrs={"placeholder": "outcome=failure&model=gpt-4o*"}),
    )
    rate = forms.FloatField(
        initial=1.0,
        min_value=0.0,
        max_value=1.0,
        label="Sampling rate",
        help_text="The share of the selected trajectories it acts on (1: all).",
    )
    action = forms.ChoiceField(choices=Rule.Action.choices)
    queue = forms.ModelChoiceField(queryset=Queue.objects.none(), required=False)
    scorer = forms.ModelChoiceField(
        queryset=Scorer.objects.none(), required=False, label="Scorer or judge"
    )
    webhook = forms.ModelChoiceField(queryset=Webhook.objects.none(), required=False)
    export = forms.CharField(
        required=False,
        max_length=4000,
        label="Export parameters",
        help_text="For the export action, as the export API takes them (JSON):"
        ' {"format": "prm-stepwise", "labels": "human:majority", "neutral": "drop"}.',
        widget=forms.TextInput(attrs={"placeholder": '{"format": "kto", ...}'}),
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fields: Any = self.fields
        fields["queue"].queryset = Queue.objects.filter(project=project).order_by("name")
        fields["scorer"].queryset = Scorer.objects.filter(
            Q(project=project) | Q(project__isnull=True)
        ).order_by("name")
        fields["webhook"].queryset = Webhook.objects.filter(project=project).order_by("name")

    def clean_selection(self) -> TrajectoryFilters:
        text = self.cleaned_data["selection"].strip().lstrip("?")
        try:
            return selection_parse(dict(QueryDict(text).lists()))
        except SelectionError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_export(self) -> dict[str, Any]:
        text = self.cleaned_data["export"].strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(f"Not JSON: {error}.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Give the parameters as a JSON object.")
        return value


class WebhookForm(forms.Form):
    name = forms.CharField(max_length=200)
    url = forms.URLField(max_length=2000, label="URL", assume_scheme="https")
    events = forms.MultipleChoiceField(
        choices=[(kind, kind) for kind in EVENT_KINDS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="What it receives; a rule's webhook action reaches it anyway.",
    )
