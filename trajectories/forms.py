"""Forms for the browse pages. The trajectory filter form is a plain GET form: its URL is
the state, so a filtered list can be bookmarked and shared."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from trajectories.formats import format_choices
from trajectories.metadata_query import MetadataSyntaxError, metadata_conditions_parse
from trajectories.models import Membership, Project
from trajectories.search import SEARCH_MAX_LENGTH
from trajectories.selectors import FILTER_CHOICES, TrajectoryFilters
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


class TrajectoryFilterForm(forms.Form):
    outcome = forms.ChoiceField(
        required=False,
        choices=[
            ("", "any"),
            ("success", "success"),
            ("failure", "failure"),
            ("unknown", "unknown"),
        ],
    )
    model = forms.CharField(required=False, max_length=200)
    task = forms.CharField(required=False, max_length=300, label="Task key")
    min_steps = forms.IntegerField(required=False, min_value=0, label="Min steps")
    max_steps = forms.IntegerField(required=False, min_value=0, label="Max steps")
    q = forms.CharField(
        required=False,
        max_length=SEARCH_MAX_LENGTH,
        label="Search",
        help_text='Words in the task or a step; "a phrase", or, -word.',
    )
    tool = forms.CharField(required=False, max_length=200, label="Tool")
    agent = forms.CharField(required=False, max_length=100, label="Agent")
    kind = forms.ChoiceField(
        required=False,
        label="Step kind",
        choices=[("", "any"), *((kind, kind) for kind in FILTER_CHOICES["step_kind"])],
    )
    error_steps = forms.ChoiceField(
        required=False,
        label="Error steps",
        choices=[("", "any"), ("yes", "some step has an error"), ("no", "no step has one")],
    )
    meta = forms.CharField(
        required=False,
        max_length=1000,
        label="Metadata",
        help_text="e.g. metadata.level = 3, metadata.cost >= 0.5",
    )
    policy = forms.CharField(
        required=False,
        max_length=200,
        label="Policy version",
        help_text="A version (7, global_step_12) or a range of the number it ends with: 3..7",
    )
    min_train_step = forms.IntegerField(required=False, label="Min training step")
    max_train_step = forms.IntegerField(required=False, label="Max training step")
    min_advantage = forms.FloatField(required=False, label="Min advantage")
    max_advantage = forms.FloatField(required=False, label="Max advantage")
    advantage_label = forms.ChoiceField(
        required=False,
        label="Advantage vs label",
        choices=[("", "any"), ("disagrees", "some step's advantage disagrees with its label")],
    )
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def clean_policy(self) -> str:
        from trajectories.training_filters import policy_version_parse

        text: str = self.cleaned_data["policy"].strip()
        try:
            policy_version_parse(text)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        return text

    def clean_meta(self) -> str:
        text: str = self.cleaned_data["meta"].strip()
        try:
            metadata_conditions_parse(text)
        except MetadataSyntaxError as error:
            raise forms.ValidationError(str(error)) from None
        return text

    def filters(self) -> TrajectoryFilters:
        """The filters from the fields that validated; an invalid field filters nothing
        (its error is shown next to it)."""
        self.is_valid()  # Fills cleaned_data with the fields that validated.
        data = self.cleaned_data
        return TrajectoryFilters(
            outcome=data.get("outcome") or "",
            model_name=data.get("model") or "",
            task_key=data.get("task") or "",
            min_steps=data.get("min_steps"),
            max_steps=data.get("max_steps"),
            search=(data.get("q") or "").strip(),
            tool_name=data.get("tool") or "",
            agent=data.get("agent") or "",
            step_kind=data.get("kind") or "",
            error_step=data.get("error_steps") or "",
            metadata=data.get("meta") or "",
            policy_version=data.get("policy") or "",
            min_training_step=data.get("min_train_step"),
            max_training_step=data.get("max_train_step"),
            min_advantage=data.get("min_advantage"),
            max_advantage=data.get("max_advantage"),
            advantage_disagrees="yes" if data.get("advantage_label") == "disagrees" else "",
        )

    def cursor(self) -> int | None:
        self.is_valid()
        return self.cleaned_data.get("after")


# Every registered format with a label (trajectories.formats), so a new importer is
# offered here as soon as it registers.
FORMAT_CHOICES = format_choices()


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
