"""Reads of API tokens."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.db.models import QuerySet

from accounts.models import ApiToken

AnyUser = User | AbstractBaseUser | AnonymousUser


def api_tokens_for_user(user: AnyUser) -> QuerySet[ApiToken]:
    """The user's live tokens, newest first (knox deletes an expired one when it is next
    presented, so an expired one may still be listed, marked by its expiry)."""
    if not user.is_authenticated:
        return ApiToken.objects.none()
    return ApiToken.objects.filter(user_id=user.pk).order_by("-created")
