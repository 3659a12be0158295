"""Screenshots for a person to look at: a browser test calls ``shot(page, name)`` at the
moments worth seeing, and where ``STEPSCOPE_SHOTS`` names a folder the picture lands there
(``STEPSCOPE_SHOTS=/tmp/shots make test``); otherwise nothing is written."""

from __future__ import annotations

import os
from typing import Any

# Controls without a name a screen reader could say.
UNLABELLED = """() => Array.from(document.querySelectorAll(
    'main input:not([type=hidden]), main select, main textarea, main button'))
  .filter(el => el.offsetParent !== null)
  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
    && !el.getAttribute('aria-labelledby') && !el.getAttribute('title')
    && !(el.tagName === 'BUTTON' && el.textContent.trim()))
  .map(el => el.outerHTML.slice(0, 120))"""

# The innermost elements that reach past the screen's right edge, to name in a failure.
WIDEST = """width => Array.from(document.querySelectorAll('body *'))
  .filter(el => el.getBoundingClientRect().right > width + 1)
  .filter(el => !Array.from(el.children).some(c => c.getBoundingClientRect().right > width + 1))
  .slice(0, 5)
  .map(el => `${el.tagName}.${el.className} ${Math.round(el.getBoundingClientRect().right)}`)"""


def shot(page: Any, name: str) -> None:
    folder = os.environ.get("STEPSCOPE_SHOTS")
    if folder:
        page.screenshot(path=f"{folder}/{name}.png", full_page=False)
