from __future__ import annotations

from typing import Any

from django import forms

from labeling.models import Queue
from scoring.methods import METHODS
from scoring.models import Scorer
from scoring.services import NEUTRAL_CHOICES
from trajectories.models import Project


class ScoringRunForm(forms.Form):
    scorer = forms.ModelChoiceField(queryset=Scorer.objects.none(), empty_label=None)
    queue = forms.ModelChoiceField(
        queryset=Queue.objects.none(),
        required=False,
        empty_label="all trajectories",
        label="Steps of",
    )
    only_unscored = forms.BooleanField(required=False, label="Only unscored steps")

    def __init__(
        self, *args: Any, scorers: list[Scorer], project: Project | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["scorer"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Scorer.objects.filter(pk__in=[s.pk for s in scorers]).order_by("name")
        queue = self.fields["queue"]
        assert isinstance(queue, forms.ModelChoiceField)
        queue.queryset = Queue.objects.filter(project=project).order_by("name")


class TrainHeadForm(forms.Form):
    name = forms.SlugField(max_length=100, initial="head")
    neutral = forms.ChoiceField(
        choices=[(c, c) for c in NEUTRAL_CHOICES], initial="skip", label="Neutral labels"
    )
    score_after = forms.BooleanField(required=False, initial=True, label="Score when trained")


class AttributionRunForm(forms.Form):
    """Credit assignment from the project page. Parameters beyond gamma and lambda go in
    ``extra`` as ``key=value`` pairs separated by spaces or commas."""

    method = forms.ChoiceField(
        choices=[(name, name) for name in METHODS if name != "token-saliency"],
        initial="prm-delta",
    )
    scorer = forms.ModelChoiceField(
        queryset=Scorer.objects.none(), required=False, empty_label="(no scorer)"
    )
    labels = forms.CharField(
        required=False,
        max_length=200,
        label="Label rewards",
        widget=forms.TextInput(attrs={"placeholder": "e.g. human:majority", "size": 16}),
    )
    gamma = forms.FloatField(
        required=False,
        min_value=0,
        max_value=1,
        widget=forms.NumberInput(attrs={"step": "any", "placeholder": "1.0", "size": 5}),
    )
    lam = forms.FloatField(
        required=False,
        min_value=0,
        max_value=1,
        label="λ",
        widget=forms.NumberInput(attrs={"step": "any", "placeholder": "0.95", "size": 5}),
    )
    extra = forms.CharField(
        required=False,
        max_length=500,
        label="Other parameters",
        widget=forms.TextInput(attrs={"placeholder": "how=min baseline=rloo", "size": 18}),
    )

    def __init__(self, *args: Any, scorers: list[Scorer], **kwargs: Any) -> None:
        # Ids of its own: the scoring form beside it on the page has a "scorer" too, and
        # two controls with one id leave the second's label pointing at the first.
        kwargs.setdefault("auto_id", "id_attribution_%s")
        super().__init__(*args, **kwargs)
        field = self.fields["scorer"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Scorer.objects.filter(pk__in=[s.pk for s in scorers]).order_by("name")

    def clean_extra(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for item in self.cleaned_data["extra"].replace(",", " ").split():
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise forms.ValidationError(f"write parameters as key=value, not {item!r}")
            pairs[name] = value
        return pairs

    def parameters(self) -> dict[str, Any]:
        data = self.cleaned_data
        parameters: dict[str, Any] = dict(data["extra"])
        for name in ("gamma", "lam"):
            if data.get(name) is not None:
                parameters[name] = data[name]
        return parameters
