"""Forms for the browse pages. The trajectory filter form is a plain GET form: its URL is
the state, so a filtered list can be bookmarked and shared."""

from __future__ import annotations

from django import forms

from trajectories.selectors import TrajectoryFilters


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
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

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
        )

    def cursor(self) -> int | None:
        self.is_valid()
        return self.cleaned_data.get("after")
