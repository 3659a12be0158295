from __future__ import annotations

import json
from typing import Any

from django import forms

from rollouts import answers
from rollouts.models import Policy, RolloutJob
from rollouts.services import MAX_K


class _PolicyChoice(forms.Form):
    policy = forms.ModelChoiceField(queryset=Policy.objects.none(), empty_label=None)
    k = forms.IntegerField(min_value=1, max_value=MAX_K, initial=8, label="k")

    def __init__(self, *args: Any, policies: list[Policy], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["policy"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Policy.objects.filter(pk__in=[p.pk for p in policies]).order_by("name")


class RolloutJobForm(_PolicyChoice):
    """A job over the project's trajectories, from the project's rollouts section."""

    steps = forms.ChoiceField(
        choices=[
            (RolloutJob.Mode.ALL, "every labelable step"),
            (RolloutJob.Mode.SEARCH, "first-error search on failures"),
        ],
        initial=RolloutJob.Mode.SEARCH,
    )
    answer_check = forms.CharField(initial=answers.DEFAULT_CHECK, max_length=300)
    max_continuations = forms.IntegerField(min_value=1, required=False, label="Budget")

    def clean_answer_check(self) -> str:
        try:
            return str(answers.check_parse(self.cleaned_data["answer_check"]))
        except answers.AnswerCheckError as error:
            raise forms.ValidationError(str(error)) from None


class StepRolloutForm(_PolicyChoice):
    """Continue from one step, or replace it first (a critical-step check)."""

    k = forms.IntegerField(min_value=1, max_value=64, initial=8, label="k")
    replace = forms.BooleanField(required=False, label="Replace this step first")
    alternative = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Blank: an annotator's correction if there is one, else a policy sample.",
    )


class PolicyForm(forms.Form):
    """A policy of this project, added from the rollouts section (the API's fields, less
    ``trust_remote_code``, which is staff's)."""

    name = forms.CharField(max_length=100)
    model_ref = forms.CharField(
        max_length=500,
        label="Model",
        help_text="A causal LM: a directory under the operator's model directories, or a hub id.",
    )
    revision = forms.CharField(max_length=100, required=False)
    queue = forms.CharField(max_length=50, initial="gpu", help_text="The workers' queue.")
    parameters = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text='Generation parameters as JSON, e.g. {"max_new_tokens": 256}.',
    )

    def clean_parameters(self) -> dict[str, Any]:
        raw = self.cleaned_data["parameters"].strip()
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except ValueError as error:
            raise forms.ValidationError(f"Not JSON: {error}.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Give a JSON object.")
        return value
