"""API authentication by our tokens (``Authorization: Token ssk_…``). A key without the
``ssk_`` prefix is left to DRF's own ``TokenAuthentication`` (keys made with
``manage.py drf_create_token``), which stays on after this class."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.utils import timezone
from knox.auth import TokenAuthentication
from knox.settings import knox_settings
from knox.signals import token_expired
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.request import Request

from accounts.models import ApiToken

# How stale ``last_used_at`` may get before a request writes it again: one UPDATE a
# minute per token, not one per request.
LAST_USED_EVERY = dt.timedelta(minutes=1)


class ApiTokenAuthentication(TokenAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if len(parts) == 2 and not parts[1].startswith(knox_settings.TOKEN_PREFIX.encode()):
            return None  # a DRF authtoken key
        try:
            result = super().authenticate(request)
        except exceptions.AuthenticationFailed as failed:
            if str(failed.detail) != "Invalid token.":
                raise
            raise exceptions.AuthenticationFailed(
                "Invalid token in the Authorization header: it was revoked, has expired or"
                " was never issued. Make a new one on your API tokens page."
            ) from None
        if result is None:
            return None
        user, token = result
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_EVERY:
            ApiToken.objects.filter(digest=token.digest).update(last_used_at=now)
        return user, token

    def _cleanup_token(self, auth_token: ApiToken) -> bool:
        """Knox's check of the presented token, without its sweep of the user's other
        tokens (one more query on every API call, to delete the expired ones): those stay
        listed, marked by their expiry, until revoked or presented. True (refused, and
        deleted) when the presented token has expired."""
        if auth_token.expiry is None or auth_token.expiry >= timezone.now():
            return False
        username = auth_token.user.get_username()
        auth_token.delete()
        token_expired.send(sender=self.__class__, username=username, source="auth_token")
        return True
