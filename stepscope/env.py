"""Typed readers for environment variables. A bad value stops start-up with a message
that names the variable, instead of surfacing later as a confusing error."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


class ConfigError(RuntimeError):
    pass


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={raw!r} is not one of {', '.join(choices)}")
    return value


def env_database_replica(
    name: str, primary: Mapping[str, Any], primary_name: str
) -> dict[str, Any] | None:
    """The Django database settings of the streaming replica in ``name`` (a postgres://
    URL), or None when it is unset. The replica holds the primary's databases under the
    same names: a URL without a database name reads ``primary``'s, one naming another
    database is refused (``primary_name`` is the name the primary was configured with,
    before a test's override)."""
    raw = env_str(name).strip()
    if not raw:
        return None
    if not raw.startswith(("postgres://", "postgresql://")):
        raise ConfigError(f"{name} must be a postgres:// URL; the replica is PostgreSQL's")
    import dj_database_url

    replica: dict[str, Any] = dict(dj_database_url.parse(raw))
    if replica.get("NAME") and replica["NAME"] != primary_name:
        raise ConfigError(
            f"{name} names database {replica['NAME']!r} and the primary {primary_name!r}:"
            " a streaming replica holds the primary's databases under the same names"
        )
    replica["NAME"] = primary["NAME"]
    for key in ("CONN_MAX_AGE", "CONN_HEALTH_CHECKS"):
        if key in primary:
            replica[key] = primary[key]
    # Django's test machinery takes it for the primary's mirror, not a database to create.
    replica["TEST"] = {"MIRROR": "default"}
    return replica
