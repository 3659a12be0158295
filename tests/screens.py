"""Screenshots for a person to look at: a browser test calls ``shot(page, name)`` at the
moments worth seeing, and where ``STEPSCOPE_SHOTS`` names a folder the picture lands there
(``STEPSCOPE_SHOTS=/tmp/shots make test``); otherwise nothing is written."""

from __future__ import annotations

import os
from typing import Any


def shot(page: Any, name: str) -> None:
    folder = os.environ.get("STEPSCOPE_SHOTS")
    if folder:
        page.screenshot(path=f"{folder}/{name}.png", full_page=False)
