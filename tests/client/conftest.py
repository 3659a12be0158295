"""The client lives in its own package (client/, installed by `make install`); a checkout
where it is not installed still tests the code beside it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from accounts.services import api_token_create

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client"
if str(CLIENT_DIR) not in sys.path:
    sys.path.insert(0, str(CLIENT_DIR))


@pytest.fixture(autouse=True)
def media_in_tmp(settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = tmp_path / "media"


@pytest.fixture
def token(owner: User) -> str:
    _, secret = api_token_create(user=owner, name="training job")
    return secret
