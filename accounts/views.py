"""The API tokens page: the user's tokens (start, name, created, last used, expiry),
a form that makes one and shows its secret once, and revoke buttons."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from accounts import selectors, services
from accounts.forms import ApiTokenForm


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    form = ApiTokenForm(request.POST if request.method == "POST" else None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            _, secret = services.api_token_create(
                user=cast(User, request.user),
                name=form.cleaned_data["name"],
                expires_in_days=form.cleaned_data["expires_in_days"],
            )
        except services.TokenError as error:
            form.add_error(error.field, error.message)
        else:
            form = ApiTokenForm()
    context = {
        "tokens": selectors.api_tokens_for_user(request.user),
        "form": form,
        "secret": secret,
        "api_root": request.build_absolute_uri("/api/v1/"),
    }
    # A refused form re-renders with its errors (200, so that HTMX swaps it in).
    if getattr(request, "htmx", False):
        return render(request, "accounts/tokens.html#tokens", context)
    return render(request, "accounts/tokens.html", context)


@login_required
@require_POST
def token_revoke(request: HttpRequest, key: str) -> HttpResponse:
    token = services.api_token_revoke(user=cast(User, request.user), key=key)
    messages.success(request, f"Token {token.name!r} revoked; it no longer works.")
    return HttpResponseRedirect(reverse("token-list"))
