"""Forms of the compare, disagreement and failure pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict

from evaluation import compare, compare_steps, decisive, disagreements, failures
from labeling.sources import label_source_parse, label_source_sql
from trajectories.models import Project


class CompareForm(forms.Form):
    """What the compare pages compare: a scorer against a label source at a threshold,
    in a slice, broken down by a dimension. ``query`` is the resolved comparison."""

    scorer = forms.ChoiceField()
    labels = forms.ChoiceField(required=False, label="Labels")
    threshold = forms.FloatField(
        required=False, min_value=0, max_value=1, widget=forms.NumberInput(attrs={"step": 0.01})
    )
    slice = forms.ChoiceField(required=False)
    by = forms.ChoiceField(required=False, label="Break down by")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(
        self, data: QueryDict | None, *, project: Project, options: compare.CompareOptions
    ) -> None:
        if data is not None and not data.get("scorer") and options.default_scorer:
            data = data.copy()
            data["scorer"] = options.default_scorer
        if data is not None and not data.get("labels"):
            data = data.copy()
            data["labels"] = options.default_labels
        initial = {"scorer": options.default_scorer, "labels": options.default_labels}
        super().__init__(data, initial=initial)
        self.project = project
        given = data or QueryDict()
        self.fields["scorer"].choices = _with_given(options.scorers, given.get("scorer", ""))  # type: ignore[attr-defined]
        self.fields["labels"].choices = _with_given(  # type: ignore[attr-defined]
            options.sources, given.get("labels", "")
        )
        self.fields["slice"].choices = [  # type: ignore[attr-defined]
            ("", "everything"),
            *options.slices,
            *([(given["slice"], given["slice"])] if _unlisted(options, given.get("slice")) else []),
        ]
        self.fields["by"].choices = [  # type: ignore[attr-defined]
            ("", "nothing"),
            *compare.SLICE_DIMENSIONS.items(),
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        threshold = data.get("threshold")
        try:
            data["query"] = compare.compare_query_build(
                self.project,
                scorer=data["scorer"],
                labels=data.get("labels") or compare.DEFAULT_LABELS,
                threshold=compare.DEFAULT_THRESHOLD if threshold is None else threshold,
                slice_text=data.get("slice") or "",
            )
        except ValueError as error:
            raise ValidationError(str(error)) from None
        return data

    @property
    def query(self) -> compare.CompareQuery:
        query: compare.CompareQuery = self.cleaned_data["query"]
        return query

    @property
    def page_number(self) -> int:
        return self.cleaned_data.get("page") or 1


def _with_given(choices: list[tuple[str, str]], given: str) -> list[tuple[str, str]]:
    """The choices, plus a value typed into the address that they do not list (another
    annotator, an import source): the form still resolves it, or says what is wrong."""
    if given and given not in {value for value, _ in choices}:
        return [*choices, (given, given)]
    return choices


def _unlisted(options: compare.CompareOptions, given: str | None) -> bool:
    if not given:
        return False
    return all(given != value for _, values in options.slices for value, _ in values)


class StepFilterForm(forms.Form):
    """Which steps a number of the compare page stands for (see ``StepFilter``)."""

    label = forms.IntegerField(required=False)
    predicted = forms.ChoiceField(
        required=False, choices=[("", "any"), ("good", "good"), ("bad", "bad")]
    )
    decided = forms.BooleanField(required=False)
    score_low = forms.FloatField(required=False, min_value=0, max_value=1)
    score_high = forms.FloatField(required=False, min_value=0, max_value=1)
    position = forms.IntegerField(required=False, min_value=0)
    length = forms.IntegerField(required=False, min_value=0)
    outcome = forms.TypedChoiceField(
        required=False, coerce=int, empty_value=None, choices=[("", "any"), ("1", "1"), ("0", "0")]
    )

    def step_filter(self) -> compare_steps.StepFilter:
        data = self.cleaned_data
        return compare_steps.StepFilter(
            label=data.get("label"),
            predicted=data.get("predicted") or "",
            decided=bool(data.get("decided")),
            score_low=data.get("score_low"),
            score_high=data.get("score_high"),
            position=data.get("position"),
            length=data.get("length"),
            outcome=data.get("outcome"),
        )


class FirstErrorFilterForm(forms.Form):
    subset = forms.ChoiceField(required=False, choices=list(compare_steps.FIRST_ERROR_SETS.items()))
    outcome = forms.ChoiceField(
        required=False, choices=list(compare_steps.FIRST_ERROR_OUTCOMES.items())
    )


class DisagreementForm(forms.Form):
    kind = forms.ChoiceField(required=False, choices=list(disagreements.KINDS.items()))
    min_gap = forms.FloatField(
        required=False,
        min_value=0,
        max_value=1,
        label="At least",
        widget=forms.NumberInput(attrs={"step": 0.05}),
        help_text="How far apart the score and the label (bad 0, good 1) are.",
    )

    def disagreement_filter(self) -> disagreements.DisagreementFilter:
        data = self.cleaned_data
        min_gap = data.get("min_gap")
        return disagreements.DisagreementFilter(
            kind=data.get("kind") or "all",
            min_gap=disagreements.DEFAULT_MIN_GAP if min_gap is None else min_gap,
        )


class FailureForm(forms.Form):
    """The failure overview's label source (a scorer's labels need a threshold) and
    slice. ``source`` is the resolved label source."""

    labels = forms.ChoiceField(required=False, label="First error by")
    threshold = forms.FloatField(
        required=False, min_value=0, max_value=1, widget=forms.NumberInput(attrs={"step": 0.01})
    )
    slice = forms.ChoiceField(required=False)
    grouping = forms.ChoiceField(required=False, choices=[("", "all"), *failures.GROUPINGS.items()])
    value = forms.CharField(required=False, max_length=500)
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(
        self, data: QueryDict, *, project: Project, options: compare.CompareOptions
    ) -> None:
        if not data.get("labels"):
            data = data.copy()
            data["labels"] = options.default_labels
        super().__init__(data)
        self.project = project
        self.fields["labels"].choices = _with_given(  # type: ignore[attr-defined]
            options.sources, data.get("labels", "")
        )
        self.fields["slice"].choices = [  # type: ignore[attr-defined]
            ("", "everything"),
            *options.slices,
            *([(data["slice"], data["slice"])] if _unlisted(options, data.get("slice")) else []),
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        threshold = data.get("threshold")
        try:
            source = label_source_parse(
                data.get("labels") or compare.DEFAULT_LABELS,
                threshold=compare.DEFAULT_THRESHOLD if threshold is None else threshold,
            )
            data["piece"] = compare.slice_parse(data.get("slice") or "")
            label_source_sql(self.project, source)
        except ValueError as error:
            raise ValidationError(str(error)) from None
        data["source"] = source
        return data

    @property
    def page_number(self) -> int:
        return self.cleaned_data.get("page") or 1


class DecisiveCompareForm(forms.Form):
    """Which decisive-failure sources the decisive page sets against each other, and
    the window ``k`` of the "within k steps" accuracy."""

    reference = forms.ChoiceField()
    candidate = forms.ChoiceField()
    k = forms.IntegerField(
        required=False, min_value=0, max_value=decisive.MAX_K, initial=1, label="Within k steps"
    )

    def __init__(self, data: QueryDict | None, *, choices: list[str]) -> None:
        """Left out: the reference is the first source (an import, else an annotator)
        and the candidate a model's, else the next source."""
        given = data or QueryDict()
        if data is not None:
            data = data.copy()
            if not data.get("reference") and choices:
                data["reference"] = choices[0]
            if not data.get("candidate"):
                others = [c for c in choices if c != data.get("reference")]
                models = [c for c in others if c.startswith("model:")]
                data["candidate"] = (models or others or [""])[0]
        super().__init__(data, initial={"k": 1})
        for name in ("reference", "candidate"):
            self.fields[name].choices = _with_given(  # type: ignore[attr-defined]
                [(c, c) for c in choices], given.get(name, "")
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("k") is None:
            data["k"] = 1
        return data


class RubricCompareForm(forms.Form):
    """Which rubric, and which two rubric sources, the rubric page sets against each
    other."""

    rubric = forms.ChoiceField(required=False)
    version = forms.TypedChoiceField(required=False, coerce=int, empty_value=None)
    a = forms.ChoiceField(label="Reference")
    b = forms.ChoiceField(label="Against")

    def __init__(
        self,
        data: QueryDict | None,
        *,
        rubrics: list[str],
        choices: list[str],
        versions: list[int] | None = None,
    ) -> None:
        """Left out: ``a`` is the first source (the annotators' majority where there is
        one) and ``b`` a judge's, else the next source."""
        given = data or QueryDict()
        data = (data or QueryDict()).copy()
        if not data.get("rubric") and rubrics:
            data["rubric"] = rubrics[0]
        if not data.get("a") and choices:
            data["a"] = choices[0]
        if not data.get("b"):
            others = [c for c in choices if c != data.get("a")]
            judges = [c for c in others if c.startswith("rubric:judge:")]
            data["b"] = (judges or others or [""])[0]
        super().__init__(data)
        self.fields["rubric"].choices = [(r, r) for r in rubrics]  # type: ignore[attr-defined]
        # The versions of the chosen rubric, newest (the current) first.
        self.fields["version"].choices = [  # type: ignore[attr-defined]
            ("", "current"),
            *((str(v), f"v{v}") for v in versions or []),
        ]
        for name in ("a", "b"):
            self.fields[name].choices = _with_given(  # type: ignore[attr-defined]
                [(c, c) for c in choices], given.get(name, "")
            )
