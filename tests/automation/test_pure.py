"""The Django-free parts: sampling by hash, the signature a Standard Webhooks library
verifies, and the address check."""

from __future__ import annotations

import json
import socket
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from standardwebhooks import Webhook as StandardWebhook
from standardwebhooks.webhooks import WebhookVerificationError

from automation import signing
from automation.addresses import AddressRefused, address_pin, url_check
from automation.sampling import sample_keeps, sample_point


def test_sampling_decides_the_same_for_a_pair_and_keeps_about_the_rate() -> None:
    kept = [t for t in range(10_000) if sample_keeps(7, t, 0.3)]
    assert kept == [t for t in range(10_000) if sample_keeps(7, t, 0.3)]
    assert 2800 < len(kept) < 3200
    # Another rule with the same rate keeps other trajectories.
    other = {t for t in range(10_000) if sample_keeps(8, t, 0.3)}
    assert len(other & set(kept)) < 0.45 * len(kept)
    # A higher rate keeps a superset: raising a rule's rate never drops what it took.
    assert set(kept) <= {t for t in range(10_000) if sample_keeps(7, t, 0.6)}
    assert all(sample_keeps(7, t, 1.0) for t in range(100))
    assert 0.0 <= sample_point(1, 1) < 1.0


def test_a_standard_webhooks_library_verifies_the_signature() -> None:
    secret = signing.secret_new()
    assert secret.startswith("whsec_")
    body = json.dumps({"type": "rule.fired", "data": {"trajectories": [1, 2]}}).encode()
    now = int(time.time())
    headers = signing.headers(secret, "msg_1", now, body)
    assert StandardWebhook(secret).verify(body, headers) == json.loads(body)
    # The library signs the same bytes the same way.
    signed = StandardWebhook(secret).sign("msg_1", datetime.fromtimestamp(now, UTC), body.decode())
    assert signed == headers["webhook-signature"]
    with pytest.raises(WebhookVerificationError):
        StandardWebhook(secret).verify(body + b" ", headers)
    with pytest.raises(WebhookVerificationError):
        StandardWebhook(signing.secret_new()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):  # a replay from ten minutes ago
        StandardWebhook(secret).verify(body, signing.headers(secret, "msg_1", now - 600, body))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.5/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://0.0.0.0/hook",
    ],
)
def test_private_loopback_and_link_local_addresses_are_refused(url: str) -> None:
    with pytest.raises(AddressRefused, match="private, loopback or link-local"):
        url_check(url, allow_private=False)
    assert url_check(url, allow_private=True) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://example.com/x", "http:// or https://"),
        ("http:///x", "names no host"),
        ("http://user:pw@example.com/x", "user name or password"),
        ("http://example.com:99999/x", "port"),
    ],
)
def test_urls_that_are_not_plain_web_addresses_are_refused(url: str, message: str) -> None:
    with pytest.raises(AddressRefused, match=message):
        url_check(url, allow_private=True)


def test_a_public_address_is_taken() -> None:
    assert url_check("http://93.184.215.14/hook", allow_private=False)


def test_an_attempt_is_pinned_to_the_address_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The URL names the checked address; the Host header and the TLS name (the
    certificate is verified against it) stay the host's."""

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        address = {"hook.example": "93.184.215.14", "six.example": "2606:2800:21f:cb07::1"}
        family = socket.AF_INET6 if ":" in address[host] else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    plain = address_pin("http://hook.example:8080/in?a=1", allow_private=False)
    assert plain.url == "http://93.184.215.14:8080/in?a=1"
    assert (plain.headers, plain.extensions) == ({"host": "hook.example:8080"}, {})
    tls = address_pin("https://six.example/in", allow_private=False)
    assert tls.url == "https://[2606:2800:21f:cb07::1]/in"
    assert (tls.headers, tls.extensions) == (
        {"host": "six.example"},
        {"sni_hostname": "six.example"},
    )
    # Allowed to call anything: not resolved, not pinned.
    assert address_pin("http://localhost:1/x", allow_private=True).url == "http://localhost:1/x"
