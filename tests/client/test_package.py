"""The client installs on its own: it needs only httpx, never Stepscope's code or Django."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.client.conftest import CLIENT_DIR

FIRST_PARTY = {
    "django",
    "rest_framework",
    "stepscope",
    "trajectories",
    "labeling",
    "scoring",
    "exports",
}


def test_the_client_imports_without_stepscope_or_django() -> None:
    probe = (
        "import sys; import stepscope_client; "
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(CLIENT_DIR)!r}); {probe}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert "httpx" in loaded
    assert not FIRST_PARTY.intersection(loaded)


def test_the_package_says_it_is_typed_and_needs_only_httpx() -> None:
    assert (CLIENT_DIR / "stepscope_client" / "py.typed").is_file()
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]
    assert project["name"] == "stepscope-client"
    assert [d.split(">")[0] for d in project["dependencies"]] == ["httpx"]
