"""The typed environment readers: a bad value stops start-up with a message naming the
variable."""

from __future__ import annotations

import pytest
from django.db import connection

from stepscope.env import ConfigError, database_jit_off, env_choice


def test_a_choice_is_read_case_blind_and_defaults_when_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STEPSCOPE_PROJECT_CREATORS", raising=False)
    assert env_choice("STEPSCOPE_PROJECT_CREATORS", "any", ("any", "staff")) == "any"
    monkeypatch.setenv("STEPSCOPE_PROJECT_CREATORS", " Staff ")
    assert env_choice("STEPSCOPE_PROJECT_CREATORS", "any", ("any", "staff")) == "staff"


def test_a_value_outside_the_choices_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPSCOPE_PROJECT_CREATORS", "admins")
    with pytest.raises(ConfigError, match=r"STEPSCOPE_PROJECT_CREATORS='admins' is not one of"):
        env_choice("STEPSCOPE_PROJECT_CREATORS", "any", ("any", "staff"))


def test_connections_run_without_jit_and_keep_the_urls_own_options() -> None:
    """JIT's threshold is a plan cost that grows with the tables: past ~5M steps the
    list's first page spent 180-350 ms compiling a 7 ms query (#37)."""
    assert database_jit_off({"NAME": "s"})["OPTIONS"] == {"options": "-c jit=off"}
    given = {"OPTIONS": {"options": "-c statement_timeout=5000", "sslmode": "require"}}
    assert database_jit_off(given)["OPTIONS"] == {
        "options": "-c statement_timeout=5000 -c jit=off",
        "sslmode": "require",
    }
    # A URL that chose JIT itself keeps its choice.
    chosen = {"OPTIONS": {"options": "-c jit=on"}}
    assert database_jit_off(chosen)["OPTIONS"] == {"options": "-c jit=on"}


@pytest.mark.django_db
def test_the_database_connection_has_jit_off() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
