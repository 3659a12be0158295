"""What every app's forms share: a form that refuses fields it does not have."""

from __future__ import annotations

from typing import Any

from django import forms


class StrictForm(forms.Form):
    """A form whose data may hold only its own fields (and the CSRF token): an unknown
    field is an error naming it, never silently dropped."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        unknown = sorted(set(self.data) - set(self.fields) - {"csrfmiddlewaretoken"})
        if unknown:
            raise forms.ValidationError(
                f"unknown field{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
            )
        return cleaned
