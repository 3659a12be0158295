"""Forms for the browse pages. The trajectory filter form is a plain GET form: its URL is
the state, so a filtered list can be bookmarked and shared."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from django import forms
from django.http import QueryDict

from stepscope.forms import StrictForm
from trajectories.formats import format_choices
from trajectories.models import Membership, Project
from trajectories.selection import (
    ALIASES,
    FILTERS,
    FilterSpec,
    SelectionError,
    TrajectoryFilters,
    selection_parse,
)
from trajectories.services.projects import SlugTaken, project_slug_check


class ProjectCreateForm(forms.ModelForm):
    """A new project; its slug is checked for uniqueness here (a form error on ``slug``)."""

    class Meta:
        model = Project
        fields = ("name", "slug", "guidelines")
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 3})}
        help_texts = {"slug": "Letters, digits, - and _; the project's address: /p/<slug>/."}

    def clean_slug(self) -> str:
        slug: str = self.cleaned_data["slug"]
        try:
            project_slug_check(slug)
        except SlugTaken as taken:
            # An error here also keeps the model's own "already exists" check quiet.
            raise forms.ValidationError(taken.message) from None
        return slug


class ProjectSettingsForm(forms.ModelForm):
    """What a project's admins change on its settings page (the slug, its address, stays)."""

    class Meta:
        model = Project
        fields = ("name", "guidelines")
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 8})}
        help_texts = {"guidelines": "Markdown shown to annotators beside every trajectory."}


class ProjectDeleteForm(forms.Form):
    confirm = forms.CharField(max_length=80, label="Type the project's slug to confirm", strip=True)


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="An existing account's username.")
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.ANNOTATOR)


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)


class InviteAcceptForm(forms.Form):
    username = forms.CharField(max_length=150)
    password = forms.CharField(widget=forms.PasswordInput, strip=False)
    password_again = forms.CharField(widget=forms.PasswordInput, strip=False, label="Again")

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        if cleaned.get("password") and cleaned.get("password") != cleaned.get("password_again"):
            self.add_error("password_again", "The two passwords differ.")
        return cleaned


def _filter_field(spec: FilterSpec) -> forms.Field:
    """The form field of one filter of the selection language; its value is checked
    again, with every other filter, by ``selection_parse``."""
    common: dict[str, Any] = {"required": False, "label": spec.label, "help_text": spec.help}
    if spec.choices:
        return forms.ChoiceField(choices=[("", "any"), *((c, c) for c in spec.choices)], **common)
    if spec.kind is int:
        low, high = spec.minimum, spec.maximum
        return forms.IntegerField(
            min_value=None if low is None else int(low),
            max_value=None if high is None else int(high),
            **common,
        )
    if spec.kind is float:
        default = getattr(TrajectoryFilters(), spec.name)
        placeholder = "any" if default is None else f"{default:g}"
        widget = forms.NumberInput(attrs={"step": "any", "placeholder": placeholder})
        return forms.FloatField(
            min_value=spec.minimum, max_value=spec.maximum, initial=default, widget=widget, **common
        )
    return forms.CharField(max_length=spec.max_length, **common)


class TrajectoryFilterForm(forms.Form):
    """Every filter of the selection language (``trajectories.selection``), a field each,
    by the names the API and every job take. Old names (``task_key``) fill their field;
    a name that is no filter (and no field of a form built on this one) is an error."""

    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    # Parameters of the page itself, not filters: paging and the sort.
    PAGE_PARAMETERS: ClassVar[tuple[str, ...]] = (
        "after",
        "offset",
        "ordering",
        "csrfmiddlewaretoken",
    )

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if data is not None:
            data = _canonical_names(data)
        super().__init__(data, *args, **kwargs)
        for name, spec in FILTERS.items():
            self.fields[name] = _filter_field(spec)
        self._filters = TrajectoryFilters()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        given = _plain(self.data)
        ignore = {*self.PAGE_PARAMETERS, *(n for n in self.fields if n not in FILTERS)}
        try:
            self._filters = selection_parse(given, ignore=ignore)
        except SelectionError as error:
            self.add_selection_error(error)
            # The filters that are fine still filter; the bad ones are shown, not applied.
            self._filters = selection_parse(given, ignore={*ignore, *error.errors})
        return cleaned

    def filters(self) -> TrajectoryFilters:
        """The filters that parsed; a bad one filters nothing (its error is shown)."""
        self.is_valid()
        return self._filters

    def cursor(self) -> int | None:
        self.is_valid()
        return self.cleaned_data.get("after")

    def add_selection_error(self, error: SelectionError) -> None:
        """Show each of ``error``'s messages beside its filter (a name that is no field
        above the form), once: a field's own check may have said it already."""
        for name, message in error.errors.items():
            field = name if name in self.fields else None
            if field is None or field not in self.errors:
                self.add_error(field, f"{name}: {message}" if field is None else message)

    def filter_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in FILTERS]

    def fields_of(self, *groups: str) -> list[forms.BoundField]:
        """The bound fields of some groups of filters (``FilterSpec.group``), in order."""
        return [self[name] for name, spec in FILTERS.items() if spec.group in groups]

    def training_fields(self) -> list[forms.BoundField]:
        """The filters on RL training facts (policy version, training step, advantage)."""
        return self.fields_of("training")

    def training_filtering(self) -> bool:
        return self._filtering("training")

    def label_and_model_fields(self) -> list[forms.BoundField]:
        """The filters on labels, scores and credits (the list's third group)."""
        return self.fields_of("labels", "models")

    def label_and_model_filtering(self) -> bool:
        """Whether one of those filters is given (the group then starts open)."""
        return self._filtering("labels", "models")

    def _filtering(self, *groups: str) -> bool:
        default = TrajectoryFilters()
        return any(
            getattr(self._filters, name) != getattr(default, name)
            for name, spec in FILTERS.items()
            if spec.group in groups
        )


def _canonical_names(data: Any) -> Any:
    """The data with each filter's old name (``task_key``) replaced by its name, so the
    old name fills the field; a name given both ways is left for the parser to refuse."""
    if not any(name in ALIASES for name in data):
        return data
    renamed = data.copy()
    for old, name in ALIASES.items():
        if old in renamed and name not in renamed:
            if isinstance(renamed, QueryDict):
                renamed.setlist(name, renamed.pop(old))
            else:
                renamed[name] = renamed.pop(old)
    return renamed


def _plain(data: Any) -> dict[str, Any]:
    """A query dict as the parser takes it: one value a name, a list where several."""
    if isinstance(data, QueryDict):
        return {name: values[0] if len(values) == 1 else values for name, values in data.lists()}
    return dict(data)


# Every registered format with a label (trajectories.formats), so a new importer is
# offered here as soon as it registers.
FORMAT_CHOICES = format_choices()
# ``mapped`` needs a mapping file, which a followed folder has no place for.
FOLLOWABLE_FORMAT_CHOICES = [choice for choice in FORMAT_CHOICES if choice[0] != "mapped"]


class ImportUploadForm(forms.Form):
    source_format = forms.ChoiceField(label="Format", choices=FORMAT_CHOICES)
    file = forms.FileField()
    mapping = forms.FileField(
        required=False, help_text="For the mapped format: a JSON mapping (see docs/formats.md)."
    )
    skip_invalid = forms.BooleanField(
        required=False,
        label="Import the valid records and report the rest",
        help_text="Otherwise one bad record rejects the whole file.",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        mapping_file = cleaned.get("mapping")
        cleaned["mapping_json"] = None
        if cleaned.get("source_format") == "mapped" and mapping_file is None:
            self.add_error("mapping", "The mapped format needs a mapping file.")
        elif mapping_file is not None:
            try:
                cleaned["mapping_json"] = json.loads(mapping_file.read().decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                self.add_error("mapping", f"Not a JSON file: {error}")
        return cleaned


class FollowSourceForm(StrictForm):
    """A folder for the worker to follow (the followed folders page)."""

    path = forms.CharField(
        label="Folder",
        max_length=1000,
        help_text="An absolute path on the server, inside a folder it lets projects follow.",
    )
    source_format = forms.ChoiceField(label="Format", choices=FOLLOWABLE_FORMAT_CHOICES)
    skip_invalid = forms.BooleanField(
        label="Skip invalid records", required=False, help_text="Import a file's good records."
    )
