"""The former name of :mod:`stepscope.processes` (the embedded servers and the worker
behind ``make run`` / ``make stop``), kept only because the Makefile still runs
``python -m stepscope.services``; it goes when the Makefile says ``stepscope.processes``."""

from __future__ import annotations

import sys

from stepscope.processes import main

if __name__ == "__main__":
    main(sys.argv)
