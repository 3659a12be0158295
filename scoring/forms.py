from __future__ import annotations

from typing import Any

from django import forms

from scoring.models import Scorer
from scoring.services import NEUTRAL_CHOICES


class ScoringRunForm(forms.Form):
    scorer = forms.ModelChoiceField(queryset=Scorer.objects.none(), empty_label=None)
    only_unscored = forms.BooleanField(required=False, label="Only unscored steps")

    def __init__(self, *args: Any, scorers: list[Scorer], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["scorer"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = Scorer.objects.filter(pk__in=[s.pk for s in scorers]).order_by("name")


class TrainHeadForm(forms.Form):
    name = forms.SlugField(max_length=100, initial="head")
    neutral = forms.ChoiceField(
        choices=[(c, c) for c in NEUTRAL_CHOICES], initial="skip", label="Neutral labels"
    )
    score_after = forms.BooleanField(required=False, initial=True, label="Score when trained")
