"""Versioned batches: a named batch of exports, each finished export into it a new
version. A training job pins one as ``name@7`` (or takes ``name``, the newest) and
fetches its files, each checked against the sha256 its manifest states."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepscope_client.errors import StepscopeError


@dataclass
class BatchFiles:
    """A version fetched into ``folder``: ``ref`` as pinned (``rl-batch@7``), the export
    that made it, the saved files (``manifest.json`` last) and the manifest."""

    ref: str
    version: int
    export: int
    folder: Path
    paths: list[Path] = field(default_factory=list)
    manifest: dict[str, Any] | None = None


def batch_ref(text: str) -> tuple[str, str]:
    """``"rl-batch@7"`` as ``("rl-batch", "7")``; ``"rl-batch"`` and ``"rl-batch@latest"``
    as ``("rl-batch", "latest")``."""
    name, _, number = text.partition("@")
    number = number or "latest"
    if not name or not (number == "latest" or (number.isdigit() and int(number) > 0)):
        raise ValueError(f"{text!r} is not a batch version: name, name@7 or name@latest")
    return name, number


class BatchCalls:
    """Mixed into ``Client``."""

    if TYPE_CHECKING:

        def _request(self, method: str, path: str, **kwargs: Any) -> Any: ...

        def _download(self, url: str, target: Path) -> str: ...

    def batches(self, project: str) -> list[dict[str, Any]]:
        """The project's batches, each with its versions (newest first)."""
        return list(self._request("GET", "batches/", params={"project": project}))

    def batch(self, project: str, name: str) -> dict[str, Any]:
        """One batch: ``{"name", "versions": [{"version", "ref", "export", …}]}``."""
        return dict(self._request("GET", f"batches/{name}/", params={"project": project}))

    def batch_version(self, project: str, ref: str) -> dict[str, Any]:
        """A version by ``ref`` (``rl-batch@7``, or ``rl-batch`` for the newest): its
        export, files (each with its ``url``), counts and manifest."""
        name, number = batch_ref(ref)
        path = f"batches/{name}/versions/{number}/"
        return dict(self._request("GET", path, params={"project": project}))

    def batch_diff(
        self, project: str, name: str, *, before: int | None = None, after: int | None = None
    ) -> dict[str, Any]:
        """What changed from version ``before`` to ``after`` (default: the newest against
        the one before): ``counts`` of trajectories and labels added, removed and
        changed, and the first of each in ``trajectories`` and ``labels``."""
        params: dict[str, Any] = {"project": project}
        if before is not None:
            params["from"] = before
        if after is not None:
            params["to"] = after
        return dict(self._request("GET", f"batches/{name}/diff/", params=params))

    def fetch_batch(self, project: str, ref: str, folder: str | Path) -> BatchFiles:
        """Save version ``ref``'s files and ``manifest.json`` in ``folder``. Each file is
        checked against its sha256: a file that does not match is removed and raises
        ``StepscopeError``. ``ref`` without a number fetches the newest version; the
        answer says which (``ref``, ``version``)."""
        version = self.batch_version(project, ref)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        fetched = BatchFiles(
            ref=version["ref"],
            version=int(version["version"]),
            export=int(version["export"]),
            folder=folder,
            manifest=version["manifest"],
        )
        for described in version["files"]:
            target = folder / described["name"]
            digest = self._download(described["url"], target)
            if digest != described["sha256"]:
                target.unlink()
                raise StepscopeError(
                    f"{described['name']} of {version['ref']}: sha256 {digest}, but the"
                    f" version states {described['sha256']}"
                )
            fetched.paths.append(target)
        manifest = folder / "manifest.json"
        self._download(f"exports/{fetched.export}/files/manifest.json/", manifest)
        fetched.paths.append(manifest)
        return fetched
