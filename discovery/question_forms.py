"""The form that asks a question (``discovery/question_services.py``)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import QueryDict

from discovery.question_services import LIMIT_MAX, QUESTION_MAX_CHARS, question_judges
from scoring.models import Scorer
from stepscope.forms import StrictForm
from trajectories.models import Project


class QuestionForm(StrictForm):
    text = forms.CharField(
        label="Question",
        max_length=QUESTION_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text='In plain words, e.g. "runs where the agent gave up on a refund".',
    )
    judge: forms.ModelChoiceField[Scorer] = forms.ModelChoiceField(
        label="Judge", queryset=Scorer.objects.none(), empty_label=None
    )
    filters = forms.CharField(
        label="Filters",
        required=False,
        max_length=4000,
        help_text="The list's query string (outcome=failure&model=…); empty: the judge proposes.",
    )
    limit = forms.IntegerField(
        label="Trajectories to read", min_value=1, max_value=LIMIT_MAX, initial=30
    )

    def __init__(self, *args: Any, project: Project, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["judge"].queryset = question_judges(project)  # type: ignore[attr-defined]

    def clean_filters(self) -> dict[str, str] | None:
        text = self.cleaned_data.get("filters", "").strip().lstrip("?")
        if not text:
            return None
        return {name: str(value) for name, value in QueryDict(text).items()}
