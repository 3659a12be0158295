"""Template filters every page may use without ``{% load %}`` (``TEMPLATES`` builtins)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

register = template.Library()


@register.filter
def ago(moment: datetime | None) -> str:
    """How long ago ``moment`` was, for a sentence: "just now" under a minute (where
    ``timesince`` says "0 minutes"), else "5 minutes ago" or "2 hours, 3 minutes ago"."""
    if moment is None:
        return ""
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"
