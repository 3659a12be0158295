"""How a webhook's request is signed: the Standard Webhooks scheme
(https://www.standardwebhooks.com/, what Svix and the ``standardwebhooks`` packages
verify).

Three headers go with each POST:

- ``webhook-id``: the delivery's id, the same on every retry and on a redelivery by
  hand, so a receiver that has seen it can drop the repeat;
- ``webhook-timestamp``: the attempt's time, in whole seconds since the epoch (a
  receiver refuses one more than five minutes off, which stops replays);
- ``webhook-signature``: ``v1,`` and the base64 of HMAC-SHA256 over
  ``{webhook-id}.{webhook-timestamp}.{body}`` keyed by the secret's bytes.

The secret is ``whsec_`` and the base64 of 32 random bytes, shown once when the webhook
is made."""

# Django-free: bytes in, header values out.
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def secret_new() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key a secret stands for (its base64 part, decoded)."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value for one attempt."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(secret: str, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secret, message_id, timestamp, body),
    }
