"""The typed environment readers: a bad value stops start-up with a message naming the
variable."""

from __future__ import annotations

import pytest

from stepscope.env import ConfigError, env_choice


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
