"""Which URLs a webhook may call: http or https, to a host whose every address is a
public one. A name that resolves to a private, loopback, link-local, reserved or
multicast address (the cloud metadata service at 169.254.169.254, the database on
localhost) is refused, since the server, not the user, would be the one calling it.

The check runs when a webhook is saved and again before each attempt (a name can be
pointed elsewhere after it was saved). An attempt then connects to the very address it
checked (``address_pin``): resolved twice, a name could answer a public address to the
check and a private one to the connection ("DNS rebinding")."""

# Django-free: the resolver is the standard library's; the caller passes the setting.
from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit


class AddressRefused(ValueError):
    """A URL the server will not call; the message says why."""


@dataclass(frozen=True)
class Pinned:
    """Where one attempt connects: ``url`` with the host replaced by the address that was
    checked, the ``Host`` header and TLS name of the original host (``extensions`` for
    httpx: the certificate is verified against the name, not the address)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, str] = field(default_factory=dict)


def address_pin(url: str, *, allow_private: bool) -> Pinned:
    """``url`` checked as ``url_check`` does, and pinned to the first address checked.
    With ``allow_private`` nothing is refused, so nothing needs pinning."""
    checked, addresses = _checked(url, allow_private=allow_private)
    if not addresses:
        return Pinned(checked)
    parts = urlsplit(checked)
    address = addresses[0]
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{host}:{parts.port}" if parts.port else host
    original = parts.netloc
    extensions = {"sni_hostname": parts.hostname or ""} if parts.scheme == "https" else {}
    return Pinned(
        urlunsplit(parts._replace(netloc=netloc)), headers={"host": original}, extensions=extensions
    )


def url_check(url: str, *, allow_private: bool) -> str:
    """``url``, checked; AddressRefused otherwise. With ``allow_private`` (the
    ``STEPSCOPE_WEBHOOK_ALLOW_PRIVATE`` setting) any address is allowed."""
    return _checked(url, allow_private=allow_private)[0]


def _checked(
    url: str, *, allow_private: bool
) -> tuple[str, list[ipaddress.IPv4Address | ipaddress.IPv6Address]]:
    """``url`` and the addresses its host resolved to, every one checked (none with
    ``allow_private``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise AddressRefused("the URL must start with http:// or https://")
    if not parts.hostname:
        raise AddressRefused("the URL names no host")
    if parts.username or parts.password:
        raise AddressRefused("the URL must not carry a user name or password")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise AddressRefused("the URL's port is not a number from 1 to 65535") from None
    if allow_private:
        return url, []
    try:
        found = socket.getaddrinfo(parts.hostname, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as error:
        raise AddressRefused(f"the host {parts.hostname!r} does not resolve ({error})") from None
    addresses = []
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if not address.is_global or address.is_multicast:
            raise AddressRefused(
                f"the host {parts.hostname!r} resolves to {address}, a private, loopback or"
                " link-local address; the server does not call those"
            )
        addresses.append(address)
    return url, addresses
