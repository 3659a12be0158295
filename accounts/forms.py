from __future__ import annotations

from django import forms

from accounts.services import MAX_EXPIRY_DAYS


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What will use it, e.g. “training job”.")
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        label="Expires in (days)",
        help_text="Empty: until you revoke it.",
    )
