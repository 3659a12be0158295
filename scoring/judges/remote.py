"""A judge behind an OpenAI-compatible ``chat/completions`` endpoint (vLLM, SGLang,
llama.cpp servers, hosted APIs), on the standard library's HTTP client.

Requests run ``concurrency`` at a time. 429 and 5xx answers (and timeouts, and a dropped
connection once the endpoint has answered) are retried with doubling backoff, honouring
``Retry-After``; what no retry mends is a :class:`JudgeError` saying which: the endpoint
cannot be reached, refuses the key (401/403), has no such model (404), or refuses the
request (400). A 400 that says the prompt passes the model's context is
:class:`PromptTooLong`, which a run that skips over-long prompts skips alone.
"""

from __future__ import annotations

import email.utils
import heapq
import itertools
import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from scoring.judges.backend import JudgeSpec, OnReply, OnTooLong, Reply, TooLong
from scoring.judges.config import JudgeError, PromptTooLong
from scoring.judges.modes import JudgeRequest, describe
from scoring.judges.replies import TokenLogprob

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
# How servers word a prompt past the context in a 400: vLLM ("maximum context length"),
# OpenAI ("context_length_exceeded"), SGLang and llama.cpp ("exceeds the context",
# "too long").
_TOO_LONG = re.compile(
    r"context.length|maximum context|context window|exceeds? the (?:model's )?context"
    r"|too long|max_model_len|prompt is longer",
    re.IGNORECASE,
)
# Without a tokenizer: how many of the run's longest prompts (in characters) the endpoint
# is asked to count, longest first, until one fits.
LONGEST_KEPT = 32


class RemoteJudge:
    def __init__(self, spec: JudgeSpec) -> None:
        self.spec = spec
        self.params = spec.params
        self.url = self.params.base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        name = self.params.api_key_env
        if name:
            key = os.environ.get(name)
            if not key:
                raise JudgeError(
                    f"the environment variable {name} (the judge's api_key_env) is not set"
                    " on this worker"
                )
            self.headers["Authorization"] = f"Bearer {key}"
        # Set once any answer came back: a refused connection before that means a wrong
        # address, not a server restarting.
        self._reached = threading.Event()
        # Attempts beyond the first, for the run's cost.
        self.retries = 0
        self._lock = threading.Lock()
        # Without a tokenizer: the longest prompts checked so far, by their size in
        # characters (a heap of at most LONGEST_KEPT, the shortest on top).
        self._longest: list[tuple[int, int, JudgeRequest]] = []
        self._order = itertools.count()

    def body(self, request: JudgeRequest) -> dict[str, Any]:
        params = self.params
        body: dict[str, Any] = {
            "model": self.spec.model_ref,
            "messages": list(request.messages),
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
            "stream": False,
        }
        if params.logprobs:
            body["logprobs"] = True
            if params.top_logprobs:
                body["top_logprobs"] = params.top_logprobs
        return body

    def ask(self, request: JudgeRequest) -> Reply:
        data = json.dumps(self.body(request)).encode()
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                http = urllib.request.Request(self.url, data=data, headers=self.headers)
                with urllib.request.urlopen(http, timeout=self.params.timeout_seconds) as answer:
                    payload = answer.read()
                self._reached.set()
                return _reply(payload, time.perf_counter() - started, request)
            except urllib.error.HTTPError as error:
                self._reached.set()
                detail = _error_text(error)
                if error.code == 400 and _TOO_LONG.search(detail):
                    raise PromptTooLong(
                        request,
                        f"the judge endpoint {self.params.base_url} refused the prompt for"
                        f" {describe(request)} as too long (HTTP 400: {detail})",
                    ) from None
                if error.code not in RETRIED_STATUSES:
                    raise self._refused(error.code, detail, request) from None
                wait_s = _retry_after(error.headers.get("Retry-After"))
                problem = f"HTTP {error.code}: {detail}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                reason = getattr(error, "reason", error)
                if not self._reached.is_set() and not isinstance(reason, TimeoutError):
                    raise JudgeError(
                        f"cannot reach the judge endpoint {self.params.base_url}: {reason}"
                    ) from None
                wait_s = None
                problem = f"{type(reason).__name__}: {reason}"
            if attempt >= self.params.max_retries:
                raise JudgeError(
                    f"the judge endpoint {self.params.base_url} failed {attempt + 1} times"
                    f" for {describe(request)}; last: {problem}"
                )
            backoff = self.params.retry_base_seconds * 2**attempt
            time.sleep(
                min(self.params.retry_max_seconds, wait_s if wait_s is not None else backoff)
            )
            attempt += 1
            with self._lock:
                self.retries += 1

    def check(self, requests: list[JudgeRequest]) -> list[TooLong]:
        """Count each prompt with the ``tokenizer`` parameter's chat template against the
        endpoint's context (its ``/models`` entry's ``max_model_len``, as vLLM gives it,
        else the ``max_length`` parameter) and return those that do not fit. Without a
        tokenizer there is nothing to count with here: the longest prompts (in
        characters) are kept for :meth:`check_finish`."""
        if not self.params.tokenizer:
            for request in requests:
                size = sum(len(str(m.get("content") or "")) for m in request.messages)
                item = (size, next(self._order), request)
                if len(self._longest) < LONGEST_KEPT:
                    heapq.heappush(self._longest, item)
                elif size > self._longest[0][0]:
                    heapq.heapreplace(self._longest, item)
            return []
        if not requests:
            return []
        from scoring.prm.adapters import load_tokenizer
        from scoring.prm.base import ScorerError
        from scoring.prm.cache import LOADED

        try:
            tokenizer = LOADED.get(
                f"judge-tokenizer:{self.params.tokenizer}",
                lambda: load_tokenizer(self.params.tokenizer),
            )
        except ScorerError as error:
            raise JudgeError(f"parameter 'tokenizer': {error}") from None
        if not getattr(tokenizer, "chat_template", None):
            raise JudgeError(
                f"parameter 'tokenizer': {self.params.tokenizer!r} has no chat template"
            )
        context = self.context_length()
        too_long = []
        for request in requests:
            ids = tokenizer.apply_chat_template(
                list(request.messages), add_generation_prompt=True, tokenize=True
            )
            if not isinstance(ids, list):  # a BatchEncoding in newer transformers
                ids = ids["input_ids"]
            if len(ids) + self.params.max_tokens > context:
                too_long.append(
                    TooLong(
                        request,
                        f"the prompt for {describe(request)} is {len(ids)} tokens; with"
                        f" max_tokens {self.params.max_tokens} it passes the endpoint's"
                        f" context of {context} tokens",
                    )
                )
        return too_long

    def check_finish(self) -> list[TooLong]:
        """Without a tokenizer, count the longest prompts :meth:`check` was given (in
        characters), longest first, with the endpoint's own ``POST /tokenize`` (vLLM's
        route, beside ``/v1``) against its context, until one fits, so the prompts past it
        are known before any chunk asks. Characters only approximate tokens, so a shorter
        prompt of denser text can still be refused when it is sent (the endpoint's 400
        says so then: :class:`PromptTooLong`); an endpoint without the route counts
        nothing here. A ``tokenizer`` makes the check exact."""
        kept = sorted(self._longest, reverse=True)
        self._longest = []
        too_long: list[TooLong] = []
        for _, _, request in kept:
            counted = self._tokenized(request)
            if counted is None:
                break
            count, context = counted
            if count + self.params.max_tokens <= context:
                break
            too_long.append(
                TooLong(
                    request,
                    f"the prompt for {describe(request)} is {count} tokens (as the endpoint"
                    f" counts them); with max_tokens {self.params.max_tokens} it passes the"
                    f" endpoint's context of {context} tokens",
                )
            )
        return too_long

    def _tokenized(self, request: JudgeRequest) -> tuple[int, int] | None:
        """The prompt's tokens as the endpoint counts them, and its context; None where
        the endpoint has no ``/tokenize`` or answers it oddly."""
        root = self.params.base_url.rstrip("/").removesuffix("/v1")
        body: dict[str, Any] = {
            "model": self.spec.model_ref,
            "messages": list(request.messages),
            "add_generation_prompt": True,
        }
        try:
            http = urllib.request.Request(
                root + "/tokenize", data=json.dumps(body).encode(), headers=self.headers
            )
            with urllib.request.urlopen(http, timeout=self.params.timeout_seconds) as answer:
                counted = json.loads(answer.read())
            count, context = int(counted["count"]), counted.get("max_model_len")
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):
                raise self._refused(error.code, _error_text(error), request) from None
            return None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            raise JudgeError(
                f"cannot reach the judge endpoint {self.params.base_url}: {reason}"
            ) from None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if not isinstance(context, int) or context <= 0:
            context = self.context_length()
        return count, context

    def context_length(self) -> int:
        """The served model's context from ``GET /models`` (``max_model_len``), else the
        ``max_length`` parameter."""
        url = self.params.base_url.rstrip("/") + "/models"
        headers = {k: v for k, v in self.headers.items() if k != "Content-Type"}
        try:
            http = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(http, timeout=self.params.timeout_seconds) as answer:
                listed = json.loads(answer.read()).get("data") or []
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):
                raise self._refused(error.code, _error_text(error), None) from None
            return self.params.max_length
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            raise JudgeError(
                f"cannot reach the judge endpoint {self.params.base_url}: {reason}"
            ) from None
        except (ValueError, AttributeError):
            return self.params.max_length
        for model in listed:
            if isinstance(model, dict) and model.get("id") == self.spec.model_ref:
                length = model.get("max_model_len")
                if isinstance(length, int) and length > 0:
                    return length
        return self.params.max_length

    def _refused(self, code: int, detail: str, request: JudgeRequest | None) -> JudgeError:
        base = self.params.base_url
        if code in (401, 403):
            env = self.params.api_key_env or "(no api_key_env set)"
            return JudgeError(f"the judge endpoint {base} refused the key from {env} (HTTP {code})")
        if code == 404:
            return JudgeError(
                f"the judge endpoint {base} has no model {self.spec.model_ref!r} (HTTP 404:"
                f" {detail})"
            )
        what = describe(request) if request is not None else "its model list"
        return JudgeError(
            f"the judge endpoint {base} refused the request for {what} (HTTP {code}: {detail})"
        )

    def judge(
        self, requests: list[JudgeRequest], on_reply: OnReply, on_too_long: OnTooLong | None = None
    ) -> None:
        """Replies in the order they come; the first unmendable error cancels the
        requests not yet sent and is raised, except a prompt refused as too long, which
        goes to ``on_too_long`` where one is given."""
        if not requests:
            return
        pending = iter(requests)
        executor = ThreadPoolExecutor(max_workers=self.params.concurrency)
        running: dict[Future[Reply], JudgeRequest] = {}
        try:
            for request in pending:
                running[executor.submit(self.ask, request)] = request
                if len(running) >= self.params.concurrency:
                    break
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    request = running.pop(future)
                    try:
                        reply = future.result()  # raises the request's JudgeError
                    except PromptTooLong as error:
                        if on_too_long is None:
                            raise
                        on_too_long(TooLong(request, str(error)))
                    else:
                        on_reply(request, reply)
                    following = next(pending, None)
                    if following is not None:
                        running[executor.submit(self.ask, following)] = following
        finally:
            executor.shutdown(wait=True, cancel_futures=True)


def _reply(payload: bytes, seconds: float, request: JudgeRequest) -> Reply:
    try:
        answer = json.loads(payload)
        choice = answer["choices"][0]
        text = choice["message"].get("content") or ""
        usage = answer.get("usage") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise JudgeError(
            f"the judge endpoint's answer for {describe(request)} is not a chat completion:"
            f" {payload[:300]!r}"
        ) from None
    return Reply(
        text=text,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        latency_s=seconds,
        finish_reason=str(choice.get("finish_reason") or ""),
        tokens=_logprobs(choice.get("logprobs")),
    )


def _logprobs(raw: Any) -> tuple[TokenLogprob, ...] | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("content"), list):
        return None
    out = []
    for item in raw["content"]:
        top = {
            str(alt["token"]): float(alt["logprob"])
            for alt in item.get("top_logprobs") or []
            if isinstance(alt, dict) and "token" in alt
        }
        out.append(TokenLogprob(str(item.get("token", "")), float(item.get("logprob", 0.0)), top))
    return tuple(out)


def _error_text(error: urllib.error.HTTPError) -> str:
    try:
        raw = error.read()[:1000].decode(errors="replace")
    except OSError:
        return error.reason or ""
    try:
        message = json.loads(raw).get("error", {})
        if isinstance(message, dict) and message.get("message"):
            return str(message["message"])
    except (ValueError, AttributeError):
        pass
    return raw.strip() or str(error.reason)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
