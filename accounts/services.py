"""Writes for API tokens: make one (its secret returned once, never stored) and revoke
one."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import AbstractBaseUser, User
from django.db import transaction
from django.http import Http404

from accounts.models import ApiToken

MAX_EXPIRY_DAYS = 3650
MAX_TOKENS_PER_USER = 100


class TokenError(Exception):
    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def api_token_create(
    *, user: User | AbstractBaseUser, name: str, expires_in_days: int | None = None
) -> tuple[ApiToken, str]:
    """A new token for ``user`` and its secret (shown to them once; only its digest is
    kept). ``expires_in_days`` ``None``: it lasts until revoked."""
    name = name.strip()
    if not name:
        raise TokenError("Give the token a name (what will use it).", field="name")
    if len(name) > 100:
        raise TokenError("A token name is at most 100 characters.", field="name")
    if expires_in_days is not None and not 1 <= expires_in_days <= MAX_EXPIRY_DAYS:
        raise TokenError(
            f"Expiry is from 1 to {MAX_EXPIRY_DAYS} days, or none.", field="expires_in_days"
        )
    with transaction.atomic():
        tokens = ApiToken.objects.select_for_update().filter(user_id=user.pk)
        if len(tokens) >= MAX_TOKENS_PER_USER:
            raise TokenError(
                f"You have {MAX_TOKENS_PER_USER} tokens; revoke one first.", field="name"
            )
        if any(t.name == name for t in tokens):
            raise TokenError(f"You have a token named {name!r} already.", field="name")
        expiry = dt.timedelta(days=expires_in_days) if expires_in_days else None
        token, secret = ApiToken.objects.create(user=user, expiry=expiry, name=name)
    return token, secret


def api_token_revoke(*, user: User | AbstractBaseUser, key: str) -> ApiToken:
    """Revoke ``user``'s token ``key`` (its ``token_key``); another user's token, or one
    that does not exist, is a 404."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(user_id=user.pk, token_key=key).first()
        if token is None:
            raise Http404("No such token.")
        token.delete()
    return token
