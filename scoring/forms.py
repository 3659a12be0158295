from __future__ import annotations

from typing import Any

from django import forms

from labeling.models import Queue
from scoring import prm
from scoring.judges.config import BACKENDS, MODES
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
    # A judge's prompt longer than its context (the service's ON_TOO_LONG).
    on_too_long = forms.ChoiceField(
        choices=[("skip", "skip that step"), ("fail", "fail the run")],
        initial="skip",
        required=False,
        label="Judge prompt too long",
    )

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


def offered_kinds() -> list[tuple[str, str]]:
    """The kinds the scorer form offers (``ScorerKind.offered``), by name."""
    return [(kind.name, kind.name) for kind in prm.kind_list() if kind.offered]


class ScorerCreateForm(forms.Form):
    """A model scorer of the project, as ``POST /api/v1/scorers/`` makes one: a PRM kind or
    an LLM judge (local model, or an OpenAI-compatible endpoint). The model reference is
    checked against the operator's model directories by the service, as the API's is.
    Further parameters (batch size, prompt format, decoding) go through the API."""

    kind = forms.ChoiceField(choices=offered_kinds, initial=prm.TOKEN_CLASSIFICATION)
    name = forms.CharField(
        max_length=100, widget=forms.TextInput(attrs={"placeholder": "qwen-prm", "size": 14})
    )
    model_ref = forms.CharField(
        max_length=500,
        label="Model",
        help_text="a directory under a model directory, or a hub id; a remote judge: the"
        " endpoint's model name",
        widget=forms.TextInput(attrs={"placeholder": "Qwen/Qwen2.5-Math-PRM-7B", "size": 28}),
    )
    queue = forms.CharField(max_length=50, initial="gpu", widget=forms.TextInput(attrs={"size": 8}))
    backend = forms.ChoiceField(
        choices=[(b, b) for b in BACKENDS], initial="local", required=False, label="Backend"
    )
    mode = forms.ChoiceField(
        choices=[(m, m) for m in MODES], initial=MODES[0], required=False, label="Mode"
    )
    # Not a URLField: a compose service name ("http://vllm:8000/v1") has no dot; the
    # judge's parameter check wants an http(s) URL.
    base_url = forms.CharField(
        required=False,
        max_length=500,
        label="Endpoint URL",
        widget=forms.TextInput(attrs={"placeholder": "http://vllm:8000/v1", "size": 24}),
    )
    api_key_env = forms.CharField(
        required=False,
        max_length=128,
        label="Key variable",
        help_text="the NAME of the environment variable holding the key on the workers",
        widget=forms.TextInput(attrs={"placeholder": "OPENAI_API_KEY", "size": 16}),
    )
    trust_remote_code = forms.BooleanField(required=False, label="Run the model's own code")

    def __init__(self, *args: Any, allow_remote_code: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "id_scorer_%s")
        super().__init__(*args, **kwargs)
        if not allow_remote_code:
            # Off on this server (or for this user): not offered at all.
            del self.fields["trust_remote_code"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        remote_judge = cleaned.get("kind") == prm.LLM_JUDGE and cleaned.get("backend") == "remote"
        if remote_judge and not cleaned.get("base_url"):
            self.add_error("base_url", "a remote judge needs its endpoint's URL")
        return cleaned

    def parameters(self) -> dict[str, Any]:
        data = self.cleaned_data
        if data["kind"] != prm.LLM_JUDGE:
            return {}
        parameters: dict[str, Any] = {
            "backend": data["backend"] or "local",
            "mode": data["mode"] or MODES[0],
        }
        if data["backend"] == "remote":
            parameters["base_url"] = data["base_url"]
            if data["api_key_env"]:
                parameters["api_key_env"] = data["api_key_env"]
        return parameters


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
