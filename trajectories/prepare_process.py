"""The helper process that prepares a large import: ``python -m trajectories.prepare_process
SPEC``, started by :func:`trajectories.prepare.file_chunks` (no Django).

It loads the compiled modules first where they may be used (:mod:`trajectories.compiled`),
then streams the prepared chunks to stdout (:func:`trajectories.prepare._serve`).
"""

# Django-free: the helper process starts without settings.
from __future__ import annotations

import json
import os
import sys

from trajectories import compiled


def main() -> None:
    spec = json.loads(sys.argv[1])
    compiled.use(spec["format"])
    from trajectories import prepare

    try:
        prepare._serve(spec, sys.stdout.buffer)
    except BrokenPipeError:
        # The importer stopped reading: it has given up on the file. Pointing stdout
        # at /dev/null keeps the interpreter's exit from failing on the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)


if __name__ == "__main__":
    main()
