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


# Every connection runs with PostgreSQL's JIT compilation off. Its threshold is a plan
# cost, and a page query's cost estimate grows with the table the LIMIT stops early in:
# past ~5M steps the list's first page crossed it and spent 180-350 ms compiling a query
# that runs in 7 ms (#37). A ``jit`` the URL's ``options`` already set is kept.
JIT_OFF = "-c jit=off"


def database_jit_off(database: dict[str, Any]) -> dict[str, Any]:
    """``database`` (Django settings of one connection) with ``jit=off`` in its options."""
    options = dict(database.get("OPTIONS") or {})
    given = str(options.get("options", ""))
    if "jit" not in given:
        options["options"] = f"{given} {JIT_OFF}".strip()
    return {**database, "OPTIONS": options}


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
    replica = database_jit_off(replica)
    replica["NAME"] = primary["NAME"]
    for key in ("CONN_MAX_AGE", "CONN_HEALTH_CHECKS"):
        if key in primary:
            replica[key] = primary[key]
    # Django's test machinery takes it for the primary's mirror, not a database to create.
    replica["TEST"] = {"MIRROR": "default"}
    return replica
