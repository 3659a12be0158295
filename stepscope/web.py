"""What every app's views share about a request: its HTMX details and its user."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails
from rest_framework.request import Request


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it (``request.htmx``)."""

    htmx: HtmxDetails


def current_user(request: HttpRequest | Request) -> User:
    """The signed-in user: every page is ``login_required`` and every API view needs an
    authenticated user, so it is never the anonymous one here."""
    return cast(User, request.user)
