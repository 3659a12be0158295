"""Forms of the export and selection pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import Count

from exports.selectors import export_choices
from exports.services.batches import batch_name_check
from exports.writers import FORMATS
from labeling.decisive_sources import decisive_source_choices
from labeling.models import Rubric
from labeling.rubric_sources import PREFIX, rubric_source_choices
from scoring import prm
from scoring.models import JudgeReply
from scoring.selectors import scorers_for_project
from trajectories.forms import TrajectoryFilterForm
from trajectories.models import Project


class SelectionForm(TrajectoryFilterForm):
    """A name and the filters to save under it: every filter of the selection language,
    as the trajectory list takes them (the page starts from the list's query string)."""

    field_order = ["name"]

    name = forms.SlugField(max_length=100, help_text="Letters, digits, - and _.")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A selection starts from the list's filters, not from a page of it.
        del self.fields["after"]


# Each format's page label, as the format declares it (exports.writers.export.FORMATS).
EXPORT_FORMAT_CHOICES = [(name, export.label) for name, export in FORMATS.items()]


class ExportForm(forms.Form):
    """The page's export form: label sources, scorers, attribution runs and selections are
    choices, each saying how much it holds (``ExportChoices``). A value typed into the
    address that they do not list is still taken and checked by the service, as the API
    and the command take any text."""

    format = forms.ChoiceField(choices=EXPORT_FORMAT_CHOICES)
    labels = forms.ChoiceField(
        initial="human:majority",
        label="Label source",
        help_text="Whose labels the records carry; the count is the steps each labels.",
    )
    neutral = forms.ChoiceField(
        choices=[
            ("", "choose…"),
            ("positive", "positive"),
            ("negative", "negative"),
            ("drop", "drop"),
            ("keep", "keep (where the format has a neutral value)"),
        ],
        help_text="What a neutral label becomes. Never implicit.",
    )
    selection = forms.ChoiceField(
        required=False, help_text="A saved selection; its definition goes in the manifest."
    )
    split = forms.CharField(required=False, max_length=200, help_text="e.g. train=0.9,test=0.1")
    seed = forms.IntegerField(initial=0, required=False)
    scorer = forms.ChoiceField(
        required=False,
        help_text="Scores to include (rl rewards, dpo by score), or to fill in a consensus.",
    )
    credit_run = forms.TypedChoiceField(
        required=False,
        coerce=int,
        empty_value=None,
        label="Credit run",
        help_text="A finished attribution run whose credits go in the rl credit column.",
    )
    threshold = forms.FloatField(initial=0.5, min_value=0.0, max_value=1.0, required=False)
    container = forms.ChoiceField(
        required=False,
        choices=[("", "default"), ("jsonl", "JSONL"), ("json", "JSON"), ("parquet", "Parquet")],
    )
    compress = forms.BooleanField(required=False, label="gzip")
    critiques = forms.ChoiceField(
        required=False,
        label="Judge critiques",
        help_text="An LLM judge whose critiques go beside trl-stepwise's labels, or make"
        " the critique format's rows.",
    )
    critique_rows = forms.ChoiceField(
        required=False,
        label="Critique rows",
        choices=[
            ("all", "every verdict the judge gave"),
            ("agreeing", "only verdicts that agree with the label"),
        ],
        help_text="The critique format.",
    )
    decisive = forms.ChoiceField(
        required=False,
        label="Decisive failures",
        help_text="Whose 'which agent, at which step' goes in each trajectory's record"
        " (trl-stepwise, prm800k, processbench; stepscope writes the label source's).",
    )
    rubric = forms.ChoiceField(
        required=False,
        label="Rubric results",
        help_text="Whose rubric marks (per criterion, and the score as rubric_reward) go in"
        " each trajectory's record: an annotator's (with their episode verdicts), the"
        " annotators' majority, or a judge's rubric run (trl-stepwise, prm800k; JSON).",
    )

    batch = forms.CharField(
        required=False,
        max_length=100,
        label="Into batch",
        help_text="A batch name (new or existing): the export becomes its next version,"
        " pinned as name@N.",
        widget=forms.TextInput(attrs={"list": "export-batches", "autocomplete": "off"}),
    )

    def __init__(self, *args: Any, project: Project, counted: bool = True, **kwargs: Any) -> None:
        """``counted=False`` (the preview, which shows no choices) neither lists nor
        counts them: the values given are taken as they are and the service checks them."""
        super().__init__(*args, **kwargs)
        choices = export_choices(project, counted=counted)
        self.kept = choices.kept  # where the choices' counts stand, for the page
        if not self.is_bound and not self.initial.get("labels"):
            self.initial["labels"] = choices.default_labels
        given = self.data if self.is_bound else {}
        offered = {
            "labels": [
                *choices.label_sources,
                ("consensus", "consensus (humans, then the scorer)"),
            ],
            "scorer": [("", "none"), *choices.scorers],
            "credit_run": [("", "none"), *choices.credit_runs],
            "selection": choices.selections,
            "critiques": [("", "none"), *judge_choices(project)],
            "decisive": [
                ("", "none"),
                *((source, source) for source in decisive_source_choices(project)),
            ],
            "rubric": [("", "none"), *(rubric_choices(project) if counted else [])],
        }
        for name, listed in offered.items():
            field = self.fields[name]
            assert isinstance(field, forms.ChoiceField)
            field.choices = _with_given(listed, str(given.get(name, "") or ""))

    def clean_batch(self) -> str:
        name: str = self.cleaned_data.get("batch") or ""
        if name:
            try:
                batch_name_check(name)
            except ValueError as error:
                raise forms.ValidationError(str(error).removeprefix("batch: ")) from None
        return name

    def export_options(self) -> dict[str, Any]:
        """The options of the judge, decisive-failure and rubric fields that are set."""
        data = self.cleaned_data
        options: dict[str, Any] = {}
        if data.get("critiques"):
            options["critiques"] = data["critiques"]
            options["critique_rows"] = data.get("critique_rows") or "all"
        if data.get("decisive"):
            options["decisive"] = data["decisive"]
        if data.get("rubric"):
            options["rubric"] = data["rubric"]
        return options


def rubric_choices(project: Project) -> list[tuple[str, str]]:
    """The rubric sources with marks on any version of the project's rubrics, as the
    export spells them (``human:majority``, ``human:<user>``, ``judge:<scorer>``)."""
    seen: dict[str, None] = {}
    for rubric in Rubric.objects.filter(project=project).order_by("name", "-version"):
        for source in rubric_source_choices(rubric):
            seen.setdefault(source.removeprefix(PREFIX), None)
    return [(source, source) for source in seen]


def judge_choices(project: Project) -> list[tuple[str, str]]:
    """The LLM judges the project may use, each with the steps it judged in it."""
    judged = (
        JudgeReply.objects.filter(trajectory__project=project, step__isnull=False, parse_error="")
        .values("scorer__name")
        .annotate(steps=Count("step", distinct=True))
    )
    counts = {row["scorer__name"]: row["steps"] for row in judged}
    names = sorted(
        set(scorers_for_project(project).filter(kind=prm.LLM_JUDGE).values_list("name", flat=True))
    )
    return [(name, f"{name} · {counts.get(name, 0):,} steps judged") for name in names]


def _with_given(choices: list[tuple[str, str]], given: str) -> list[tuple[str, str]]:
    """The choices, plus a value given that they do not list (another annotator, a run
    beyond the ones shown): the service resolves it, or says what is wrong."""
    if given and given not in {value for value, _ in choices}:
        return [*choices, (given, given)]
    return choices
