"""The Stepscope REST API (``/api/v1/``, docs/api.md) in a few calls for a training script."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx

from stepscope_client.automation import AutomationCalls
from stepscope_client.batches import BatchCalls
from stepscope_client.errors import StepscopeError
from stepscope_client.jobs import Job, ProgressBar
from stepscope_client.records import trajectory_record
from stepscope_client.training import TrainingCalls

T = TypeVar("T")
Progress = Callable[[Job], None]

# A retried request waits for the server's Retry-After, at most this many times.
THROTTLE_RETRIES = 5


@dataclass
class PushResult:
    """What a push of trajectories did, summed over its requests (one import each)."""

    created: int = 0
    unchanged: int = 0
    rejected: int = 0
    steps: int = 0
    imports: list[Job] = field(default_factory=list)


@dataclass
class ScoresResult:
    """What a push of step scores stored; ``rejected`` names refused records by their
    index in the whole list (with ``skip_invalid``)."""

    stored: int = 0
    rejected: dict[int, str] = field(default_factory=dict)
    runs: list[int] = field(default_factory=list)


class Client(TrainingCalls, BatchCalls, AutomationCalls):
    """``Client("http://127.0.0.1:8000", "ssk_…")``; every call acts as the token's user.
    Beside the calls here: projects, scorers, runs and their results (``training.py``)
    versioned batches (``batches.py``), and rules and webhooks (``automation.py``).

    Writes the server refuses raise ``StepscopeError`` with the status and the API's
    field errors. A throttled request (429) is retried after its ``Retry-After``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1/",
            headers={"Authorization": f"Token {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # Trajectories

    def push_trajectories(
        self,
        project: str,
        records: Iterable[Mapping[str, Any] | Any],
        *,
        chunk_size: int = 500,
        skip_invalid: bool = False,
    ) -> PushResult:
        """Import trajectories in Stepscope's own format (dicts, Stepscope's
        ``ParsedTrajectory``, or dataclasses with the format's fields), ``chunk_size`` to
        a request. A retried push changes nothing: a
        trajectory already in the project counts as unchanged."""
        result = PushResult()
        offset = 0
        for chunk in _chunks((trajectory_record(r) for r in records), chunk_size):
            body = {"project": project, "trajectories": chunk, "skip_invalid": skip_invalid}
            try:
                batch = self._request("POST", "imports/", json=body)
            except StepscopeError as error:
                # The server counts records within this request: name them in the whole list.
                if offset:
                    _renumber(error, offset)
                raise
            offset += len(chunk)
            result.created += batch["created_count"]
            result.unchanged += batch["unchanged_count"]
            result.rejected += batch["rejected_count"]
            result.steps += batch["step_count"]
            result.imports.append(Job("imports", batch))
        return result

    def upload_file(
        self,
        project: str,
        path: str | Path,
        format: str = "stepscope",
        *,
        skip_invalid: bool = False,
    ) -> Job:
        """Send a file in any import format; a worker imports it. ``wait`` on the job."""
        path = Path(path)
        with path.open("rb") as handle:
            batch = self._request(
                "POST",
                "imports/",
                data={"project": project, "format": format, "skip_invalid": str(skip_invalid)},
                files={"file": (path.name, handle)},
            )
        return Job("imports", batch)

    # Projects and members (a project admin's)

    def update_project(
        self, project: str, *, name: str | None = None, guidelines: str | None = None
    ) -> dict[str, Any]:
        """Change a project's name or guidelines (what is given); its slug stays."""
        changes = {k: v for k, v in (("name", name), ("guidelines", guidelines)) if v is not None}
        return dict(self._request("PATCH", f"projects/{project}/", json=changes))

    def delete_project(self, project: str, *, confirm: str) -> Job:
        """Delete a project: ``confirm`` must be its slug. It is hidden at once and removed
        by a worker; ``wait`` on the returned job (``removed`` says what went)."""
        deletion = self._request("DELETE", f"projects/{project}/", json={"confirm": confirm})
        return Job("project-deletions", deletion)

    def members(self, project: str) -> list[dict[str, Any]]:
        """``[{"id", "username", "role"}]``."""
        return list(self._request("GET", f"projects/{project}/members/"))

    def add_member(self, project: str, username: str, role: str = "annotator") -> dict[str, Any]:
        body = {"username": username, "role": role}
        return dict(self._request("POST", f"projects/{project}/members/", json=body))

    def set_role(self, project: str, member: int, role: str) -> dict[str, Any]:
        """Change member ``member``'s role (its ``id``); the last admin stays an admin."""
        path = f"projects/{project}/members/{member}/role/"
        return dict(self._request("POST", path, json={"role": role}))

    def remove_member(self, project: str, member: int) -> None:
        self._request("POST", f"projects/{project}/members/{member}/remove/")

    def invite(self, project: str, role: str = "annotator") -> dict[str, Any]:
        """A one-time invite link with ``role``: the answer's ``link``, shown this once."""
        return dict(self._request("POST", f"projects/{project}/invites/", json={"role": role}))

    def invites(self, project: str) -> list[dict[str, Any]]:
        """The project's open invite links (without their secrets)."""
        return list(self._request("GET", f"projects/{project}/invites/"))

    def revoke_invite(self, project: str, invite: int) -> None:
        self._request("POST", f"projects/{project}/invites/{invite}/revoke/")

    def trajectory_id(self, project: str, external_id: str) -> int:
        """The id the labels API takes for a trajectory you pushed under ``external_id``.

        An id pushed twice with different content names two trajectories; rather than
        pick one, that is an error naming both (or all), so labels never land on the
        wrong one."""
        found = self._request(
            "GET", "trajectories/", params={"project": project, "external_id": external_id}
        )
        if not found["results"]:
            raise StepscopeError(
                f"no trajectory {external_id!r} in project {project!r}", status=404
            )
        ids = sorted(int(result["id"]) for result in found["results"])
        if len(ids) > 1 or found.get("next"):
            listed = ", ".join(map(str, ids)) + (", …" if found.get("next") else "")
            raise StepscopeError(
                f"several trajectories in project {project!r} have the id {external_id!r}"
                f" (ids {listed}), pushed with different content; use the id of the one"
                " you mean",
                status=409,
            )
        return ids[0]

    # Labels

    def push_labels(
        self,
        labels: Sequence[Mapping[str, Any]],
        *,
        submit: bool = False,
        queue: int | None = None,
        **verdict: Any,
    ) -> dict[str, Any]:
        """Set many labels in one request, all or nothing (up to 10,000). Each names its
        step by ``step`` (id) or ``trajectory`` (id) and ``index``. With ``submit`` each
        trajectory they touch is then submitted, with ``outcome``, ``finish_reason``,
        ``comment`` and ``flagged`` from ``verdict``."""
        body: dict[str, Any] = {"labels": list(labels), "submit": submit, **verdict}
        if queue is not None:
            body["queue"] = queue
        answer: dict[str, Any] = self._request("POST", "labels/bulk/", json=body)
        return answer

    def submit(self, trajectory: int, **verdict: Any) -> dict[str, Any]:
        """Finish a trajectory (``outcome``, ``finish_reason``, ``comment``, ``flagged``,
        ``queue``), so its labels count."""
        answer: dict[str, Any] = self._request(
            "POST", f"trajectories/{trajectory}/submit/", json=verdict
        )
        return answer

    # Rubrics and episode verdicts

    def save_rubric(
        self, project: str, criteria: Sequence[Mapping[str, Any]], *, name: str = "rubric"
    ) -> dict[str, Any]:
        """Save a new version of the project's rubric ``name`` (project admins): each
        criterion ``{"text", "weight", "condition"}``."""
        body = {"name": name, "criteria": [dict(c) for c in criteria]}
        answer: dict[str, Any] = self._request("POST", f"projects/{project}/rubrics/", json=body)
        return answer

    def rubrics(self, project: str) -> list[dict[str, Any]]:
        """The project's current rubrics (the newest version of each name)."""
        answer: list[dict[str, Any]] = self._request("GET", f"projects/{project}/rubrics/")
        return answer

    def mark_rubric(
        self,
        trajectory: int,
        rubric: int,
        marks: Sequence[Mapping[str, Any]],
        *,
        queue: int | None = None,
    ) -> dict[str, Any]:
        """Set your marks on a rubric version for a trajectory, all or none: each
        ``{"criterion", "mark" (met, not_met, na), "evidence" (step indexes)}``. Returns
        your result with its ``score``."""
        body: dict[str, Any] = {"rubric": rubric, "marks": [dict(m) for m in marks]}
        if queue is not None:
            body["queue"] = queue
        answer: dict[str, Any] = self._request(
            "POST", f"trajectories/{trajectory}/rubric/", json=body
        )
        return answer

    def rubric_results(self, trajectory: int) -> list[dict[str, Any]]:
        """The rubric results on a trajectory you may see (blind mode applies)."""
        answer: list[dict[str, Any]] = self._request("GET", f"trajectories/{trajectory}/rubric/")
        return answer

    def rubric_alignment(self, project: str, a: str, b: str, *, rubric: str = "") -> dict[str, Any]:
        """Rubric source ``b`` against ``a`` per criterion (``rubric:human:<user>``,
        ``rubric:human:majority``, ``rubric:judge:<scorer>``) on the project's current
        rubric (``rubric``, by name, where it has several): each criterion's ``pairs``,
        ``agreement``, ``kappa``, ``confusion`` and ``evidence_jaccard``."""
        params = {"a": a, "b": b, **({"rubric": rubric} if rubric else {})}
        answer: dict[str, Any] = self._request(
            "GET", f"projects/{project}/rubric-alignment/", params=params
        )
        return answer

    def episode_verdict(self, trajectory: int, **answers: Any) -> dict[str, Any]:
        """Set your episode verdict (``agent`` left out: the whole run; ``outcome``,
        ``failure_mode``, ``critique``, ``queue``)."""
        answer: dict[str, Any] = self._request(
            "POST", f"trajectories/{trajectory}/episode/", json=answers
        )
        return answer

    def episode_verdicts(self, trajectory: int) -> list[dict[str, Any]]:
        """The episode verdicts on a trajectory you may see (blind mode applies)."""
        answer: list[dict[str, Any]] = self._request("GET", f"trajectories/{trajectory}/episode/")
        return answer

    # Span labels: a value on a run of steps under one of the project's span schemas

    def spans(self, trajectory: int) -> dict[str, Any]:
        """The spans on a trajectory you may see (blind mode applies), as
        ``{"spans": [{"id", "schema_name", "start", "end", "value", "annotator", ...}],
        "agreement": {schema: {"iou", "step_agreement", ...}}}``."""
        answer: dict[str, Any] = self._request("GET", f"trajectories/{trajectory}/spans/")
        return answer

    def add_span(
        self,
        trajectory: int,
        schema: str | int,
        start: int,
        end: int,
        value: str,
        *,
        queue: int | None = None,
    ) -> dict[str, Any]:
        """Give steps ``start`` to ``end`` (both included) your ``value`` under the span
        schema ``schema`` (its name or id); the same range again changes your value.
        Returns the span."""
        body: dict[str, Any] = {"schema": str(schema), "start": start, "end": end, "value": value}
        if queue is not None:
            body["queue"] = queue
        answer: dict[str, Any] = self._request(
            "POST", f"trajectories/{trajectory}/spans/", json=body
        )
        return answer

    def delete_span(self, span: int, *, queue: int | None = None) -> None:
        """Remove one of your spans (kept in the history)."""
        params = {"queue": queue} if queue is not None else None
        self._request("DELETE", f"spans/{span}/", params=params)

    def final_spans(self, trajectory: int) -> list[dict[str, Any]]:
        """The trajectory's final (adjudicated) spans, in step order:
        ``[{"id", "schema_name", "start", "end", "value", "adjudicator", ...}]`` (none in
        a blind project until you submit it)."""
        answer: dict[str, Any] = self._request("GET", f"trajectories/{trajectory}/final-spans/")
        finals: list[dict[str, Any]] = answer["final_spans"]
        return finals

    def set_final_span(
        self,
        trajectory: int,
        *,
        pick: int | None = None,
        schema: str | int | None = None,
        start: int | None = None,
        end: int | None = None,
        value: str | None = None,
    ) -> dict[str, Any]:
        """Adjudicate (researchers and admins): make an annotator's span final
        (``pick``, its id), or give steps ``start`` to ``end`` the final ``value`` under
        the span schema ``schema``; the same range and schema again changes the value.
        Returns the final span."""
        if pick is not None:
            body: dict[str, Any] = {"pick": pick}
        else:
            body = {"schema": str(schema), "start": start, "end": end, "value": value}
        answer: dict[str, Any] = self._request(
            "POST", f"trajectories/{trajectory}/final-spans/", json=body
        )
        return answer

    def delete_final_span(self, final_span: int) -> None:
        """Remove a final span (researchers and admins; kept in the history)."""
        self._request("DELETE", f"final-spans/{final_span}/")

    # Scores

    def push_scores(
        self,
        project: str,
        scorer: str,
        scores: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = 100_000,
        skip_invalid: bool = False,
    ) -> ScoresResult:
        """Store step scores computed elsewhere: ``{"trajectory": external id, "step":
        index, "value": probability the step is correct}``. The scorer is made (kind
        external) if the project has none of that name."""
        result = ScoresResult()
        offset = 0
        for chunk in _chunks((dict(s) for s in scores), chunk_size):
            body = {
                "project": project,
                "scorer": scorer,
                "scores": chunk,
                "skip_invalid": skip_invalid,
            }
            try:
                answer = self._request("POST", "step-scores/import/", json=body)
            except StepscopeError as error:
                # Name refused records by their index in the whole list, not the chunk.
                if isinstance(error.errors, dict) and isinstance(error.errors.get("scores"), dict):
                    error.errors["scores"] = {
                        str(int(k) + offset): v for k, v in error.errors["scores"].items()
                    }
                raise
            result.stored += answer["stored"]
            result.rejected.update({int(k) + offset: v for k, v in answer["rejected"].items()})
            result.runs.append(answer["run"])
            offset += len(chunk)
        return result

    def start_scoring(
        self, project: str, scorer: str, *, on_too_long: str | None = None, **options: Any
    ) -> Job:
        """Queue a scoring run of ``scorer`` (a name or id) over the project's steps.
        For an LLM judge, ``on_too_long`` says what a prompt longer than its context does:
        ``"skip"`` (the server's default: that step gets no verdict, and the run's
        ``metrics["skipped"]`` names it and why) or ``"fail"`` (the run fails). Further
        fields (``only_unscored``, ``trajectories``, ``filters``, ``queue``,
        ``prompt_version``, ``rubric`` for a rubric-mode judge) pass as given."""
        body: dict[str, Any] = {"project": project, "scorer": scorer, **options}
        if on_too_long is not None:
            body["on_too_long"] = on_too_long
        return Job("scoring-runs", self._request("POST", "scoring-runs/", json=body))

    # Exports

    def start_export(
        self,
        project: str,
        format: str,
        labels: str,
        *,
        neutral: str = "keep",
        **options: Any,
    ) -> Job:
        """Queue an export (``format`` such as ``trl-stepwise``, ``rl``, ``kto``; ``labels`` a
        label source such as ``human:majority`` or ``import:processbench``). Further
        fields (``selection``, ``split``, ``container``, ``scorer``…) pass as given."""
        body = {"project": project, "format": format, "labels": labels, "neutral": neutral}
        return Job("exports", self._request("POST", "exports/", json={**body, **options}))

    def download_export(self, job: Job, folder: str | Path) -> list[Path]:
        """Wait for the export to finish, then save its files and ``manifest.json`` in
        ``folder``; returns their paths."""
        job = self.wait(job)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        saved = []
        for name in [f["name"] for f in job.data["files"]] + ["manifest.json"]:
            target = folder / name
            self._download(f"exports/{job.id}/files/{name}/", target)
            saved.append(target)
        return saved

    # Jobs

    def job(self, kind: str, job_id: int) -> Job:
        """A job as it is now, by its collection (``imports``, ``exports``…) and id."""
        return Job(kind, self._request("GET", f"{kind}/{job_id}/"))

    def cancel(self, job: Job) -> Job:
        """Stop a queued or running job through its ``cancel/`` endpoint (imports have one;
        nothing of a cancelled import stays)."""
        return Job(job.kind, self._request("POST", f"{job.kind}/{job.id}/cancel/"))

    def wait(
        self,
        job: Job,
        *,
        progress: Progress | bool | None = None,
        poll: float = 0.5,
        timeout: float | None = None,
        check: bool = True,
    ) -> Job:
        """Poll ``job`` until it ends and return it as it ended. ``progress`` is called
        with the job after each poll (``True``: a bar on stderr). With ``check`` a job
        that failed or was cancelled raises ``StepscopeError``; past ``timeout`` seconds,
        ``TimeoutError``."""
        report: Progress | None = ProgressBar() if progress is True else progress or None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if report is not None:
                report(job)
            if job.finished:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{job!r} has not ended after {timeout}s")
            time.sleep(poll)
            job = self.job(job.kind, job.id)
        if check and job.status != "done":
            reason = job.data.get("error") or job.data.get("errors") or job.status
            raise StepscopeError(f"{job.kind} {job.id} {job.status}: {reason}", errors=job.data)
        return job

    # The wire

    def _download(self, url: str, target: Path) -> str:
        """Stream ``url`` (a path under the API or a whole address) into ``target``;
        return its sha256."""
        digest = hashlib.sha256()
        with self._http.stream("GET", url) as response:
            if response.status_code >= 400:
                response.read()
                raise _error(response)
            with target.open("wb") as out:
                for block in response.iter_bytes():
                    digest.update(block)
                    out.write(block)
        return digest.hexdigest()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        for _ in range(THROTTLE_RETRIES):
            response = self._http.request(method, path, **kwargs)
            if response.status_code != 429:
                break
            time.sleep(float(response.headers.get("Retry-After", "1")))
        if response.status_code >= 400:
            raise _error(response)
        return response.json() if response.content else None


def _error(response: httpx.Response) -> StepscopeError:
    try:
        body: Any = response.json()
    except ValueError:
        body = {"detail": response.text[:500]}
    message = _message(body, f"{response.request.method} {response.request.url.path}")
    return StepscopeError(message, status=response.status_code, errors=body)


def _renumber(error: StepscopeError, offset: int) -> None:
    """Name a refused chunk's records (``record 3`` of the request) by their index in
    the whole push (``record 503``)."""
    items = error.errors.get("errors") if isinstance(error.errors, dict) else None
    for item in items or []:
        where = item.get("location", "") if isinstance(item, dict) else ""
        if where.startswith("record ") and where[7:].isdigit():
            item["location"] = f"record {int(where[7:]) + offset}"
    error.args = (_message(error.errors, "push"),)


def _message(body: Any, request: str) -> str:
    if isinstance(body, dict) and isinstance(body.get("detail"), str):
        message = body["detail"]
    elif isinstance(body, dict) and body.get("errors") and isinstance(body["errors"], list):
        # A refused push answers with its import, whose errors name each bad record.
        message = "; ".join(_record_error(e) for e in body["errors"][:3])
    else:
        message = f"{request} refused: {body}"
    return message


def _record_error(error: Any) -> str:
    if not isinstance(error, dict):
        return str(error)
    where = error.get("location", "")
    if error.get("field"):
        where = f"{where}, field {error['field']!r}"
    return f"{where}: {error.get('message', '')}"


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    if size < 1:
        raise ValueError("chunk_size must be at least 1")
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
