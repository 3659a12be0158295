"""What every judge backend offers: ``judge(requests, on_reply, on_too_long)`` calls
``on_reply`` with each request and its :class:`Reply` as soon as the reply is there (so
the caller can store it before the next one), and raises :class:`JudgeError` for what no
retry will mend; a prompt found too long only when asked (the endpoint's refusal) goes to
``on_too_long`` where one is given, and the other requests go on, else it is raised
(:class:`PromptTooLong`). ``check(requests)`` returns the requests whose prompts are longer
than the context allows, each with the reason (:class:`TooLong`), asking nothing, and
``check_finish()``, called once every request of a run went through ``check``, returns
those found by what needs them all (a remote judge without a ``tokenizer`` asks the
endpoint to count the run's longest prompts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from scoring.judges.config import JudgeParams
from scoring.judges.modes import JudgeRequest
from scoring.judges.replies import TokenLogprob
from scoring.prm.params import spec_key


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str = ""
    tokens: tuple[TokenLogprob, ...] | None = None


OnReply = Callable[[JudgeRequest, Reply], None]


@dataclass(frozen=True)
class TooLong:
    """A request whose prompt does not fit the judge's context, and why (the tokens it
    counts, the context)."""

    request: JudgeRequest
    reason: str


OnTooLong = Callable[[TooLong], None]


class Judge(Protocol):
    def judge(
        self, requests: list[JudgeRequest], on_reply: OnReply, on_too_long: OnTooLong | None = None
    ) -> None: ...

    def check(self, requests: list[JudgeRequest]) -> list[TooLong]: ...

    def check_finish(self) -> list[TooLong]: ...


@dataclass(frozen=True)
class JudgeSpec:
    """A judge as a worker loads it: the model (a directory or hub id for a local judge,
    the endpoint's model name for a remote one) and the parameters."""

    model_ref: str
    params: JudgeParams
    revision: str = ""
    trust_remote_code: bool = False

    @property
    def key(self) -> str:
        return spec_key(
            self.model_ref, self.revision, self.trust_remote_code, self.params.to_dict()
        )


def judge_load(spec: JudgeSpec) -> Judge:
    """The judge for ``spec``: a local model is built once per process and kept in the
    worker's one model cache; a remote client is cheap and built each time (it reads the
    key from the environment then)."""
    if spec.params.backend == "remote":
        from scoring.judges.remote import RemoteJudge

        return RemoteJudge(spec)
    from scoring.judges.local import LocalJudge
    from scoring.prm.cache import LOADED

    return LOADED.get(f"judge:{spec.key}", lambda: LocalJudge(spec))
