"""A user's API tokens: named, stored as a hash (django-rest-knox's digest), shown once
when made, with the time each was last used and an optional expiry."""

from __future__ import annotations

import datetime as dt
from typing import ClassVar

from django.db import models
from knox.models import AbstractAuthToken


class ApiToken(AbstractAuthToken):
    """Knox's token (``digest``: SHA-512 of the secret; ``token_key``: its first 15
    characters, the ``ssk_`` prefix included, which the list shows and the URLs name it
    by; ``expiry``; ``created``) with a name and the last time it authenticated. Revoking
    deletes the row, so the secret is worth nothing from then on."""

    # Annotated: knox ships no type hints, so the stubs' plugin cannot infer these.
    name: models.CharField[str, str] = models.CharField(max_length=100)
    last_used_at: models.DateTimeField[dt.datetime | None, dt.datetime | None] = (
        models.DateTimeField(null=True, blank=True)
    )

    class Meta:
        verbose_name = "API token"
        ordering: ClassVar = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key}…)"
