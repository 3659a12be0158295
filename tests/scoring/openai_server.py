"""An OpenAI-compatible ``chat/completions`` server for the tests, run as its own process
on loopback: ``python -m tests.scoring.openai_server --model DIR --name NAME [--key KEY]
[--max-context N]``. It prints ``PORT <n>`` once it listens.

It serves a local model (the tiny random judge) through the real judge generation code,
streaming off, logprobs on request. ``POST /control`` (JSON) tells it what to do next:
``fail`` (a list of statuses the next requests answer with, e.g. ``[429, 500]``),
``retry_after`` (seconds sent with a 429), ``delay`` (seconds each answer waits, to see
concurrency), ``fixed_replies`` (texts the next requests reply, in turn) or
``fixed_reply`` (text every request replies), ``replies_for`` (a list of ``{"contains",
"reply"}``: a request whose user message holds ``contains`` replies ``reply``, the first
such rule winning, whatever order concurrent requests come in), ``oracles`` (a list of
``{"task", "step", "agent"}``: a request whose user message holds an oracle's task text
is answered as a perfect failure-attribution judge would, reading the default attribution
prompts: the decisive step is ``step``, its agent ``agent``), ``reset``. ``GET /stats``
says what it saw: requests, answers by status, the most in flight at once and those in
flight now, the user messages asked.
``max_context`` replaces ``--max-context`` (for long real logs). ``GET /v1/models`` lists
the model with its ``max_model_len``, as vLLM does, and ``POST /tokenize`` counts a
chat's prompt tokens in vLLM's shape (``{"count", "max_model_len", "tokens"}``) unless
``tokenize`` is false (then it is a 404, as on servers without the route); ``stats`` counts
those in ``tokenized``, not in ``requests``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from scoring.judges.backend import JudgeSpec
from scoring.judges.config import judge_params
from scoring.judges.local import LocalJudge
from scoring.judges.modes import JudgeRequest

_FRESH: dict[str, Any] = {
    "fail": [],
    "retry_after": None,
    "delay": 0.0,
    "fixed_replies": [],
    "fixed_reply": None,
    "replies_for": [],
    "oracles": [],
    "max_context": None,
    "tokenize": True,
}


def oracle_reply(oracles: list[dict[str, Any]], message: str) -> str | None:
    """What a judge that knows the decisive step answers to a default attribution
    prompt, or None when no oracle's task is in the message."""
    for oracle in oracles:
        if oracle["task"] not in message:
            continue
        step, agent = int(oracle["step"]), oracle["agent"]
        judged = re.search(r"Step to judge \(step (\d+)", message)
        if judged:
            yes = int(judged.group(1)) == step
            answer = "yes" if yes else "no"
            return f"Step {judged.group(1)} looks {'wrong' if yes else 'fine'}.\nDecisive: {answer}"
        halves = re.search(r"first half, steps (\d+) to (\d+)", message)
        if halves:
            first = int(halves.group(1)) <= step <= int(halves.group(2))
            half = "first" if first else "second"
            return f"The error comes {'early' if first else 'late'}.\nHalf: {half}"
        return f"{agent} went wrong here.\nAgent: {agent}\nStep: {step}"
    return None


class State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generate_lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.control = json.loads(json.dumps(_FRESH))
        self.requests = 0
        self.tokenized = 0
        self.statuses: dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.asked: list[str] = []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--key", default="")
    parser.add_argument("--max-context", type=int, default=4096)
    options = parser.parse_args()
    params = judge_params({"max_length": options.max_context, "device": "cpu", "max_tokens": 1})
    judge = LocalJudge(JudgeSpec(options.model, params))
    state = State()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                with state.lock:
                    context = state.control["max_context"] or options.max_context
                listed = {"id": options.name, "object": "model", "max_model_len": context}
                return self._send(200, {"object": "list", "data": [listed]}, counted=False)
            if self.path != "/stats":
                return self._send(404, {"error": {"message": "not found"}})
            with state.lock:
                stats = {
                    "requests": state.requests,
                    "tokenized": state.tokenized,
                    "statuses": dict(state.statuses),
                    "max_in_flight": state.max_in_flight,
                    "in_flight": state.in_flight,
                    "asked": list(state.asked),
                }
            self._send(200, stats, counted=False)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path == "/control":
                with state.lock:
                    if body.pop("reset", False):
                        state.reset()
                    state.control.update(body)
                return self._send(200, {"ok": True}, counted=False)
            if self.path == "/tokenize":
                return self._tokenize(body)
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            with state.lock:
                state.requests += 1
                state.in_flight += 1
                self.in_flight = True
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
                control = state.control
                failure = control["fail"].pop(0) if control["fail"] else None
                fixed = control["fixed_replies"].pop(0) if control["fixed_replies"] else None
                fixed = fixed if fixed is not None else control["fixed_reply"]
                if fixed is None:
                    asked = body["messages"][-1]["content"]
                    fixed = next(
                        (r["reply"] for r in control["replies_for"] if r["contains"] in asked),
                        None,
                    )
                if fixed is None and control["oracles"]:
                    fixed = oracle_reply(control["oracles"], body["messages"][-1]["content"])
                delay = float(control["delay"])
                context = int(control["max_context"] or options.max_context)
                retry_after = control["retry_after"]
            try:
                time.sleep(delay)
                self._complete(body, failure, fixed, retry_after, context)
            finally:
                self._leave()

        def _leave(self) -> None:
            """The request stops counting as in flight before its answer is written: once
            written, the client may send its next request before this thread goes on, and
            the two would count together on a busy machine (4 in flight at a limit of 3)."""
            with state.lock:
                if getattr(self, "in_flight", False):
                    self.in_flight = False
                    state.in_flight -= 1

        def _tokenize(self, body: dict[str, Any]) -> None:
            with state.lock:
                if not state.control["tokenize"]:
                    return self._send(404, {"detail": "Not Found"}, counted=False)
                state.tokenized += 1
                context = int(state.control["max_context"] or options.max_context)
            with state.generate_lock:
                ids = judge.prompt_ids(tuple(body["messages"]))
            answer = {"count": len(ids), "max_model_len": context, "tokens": ids}
            self._send(200, answer, counted=False)

        def _complete(
            self,
            body: dict[str, Any],
            failure: int | None,
            fixed: str | None,
            retry_after: Any,
            context: int,
        ) -> None:
            if options.key and self.headers.get("Authorization") != f"Bearer {options.key}":
                return self._send(401, {"error": {"message": "Incorrect API key provided"}})
            if body.get("model") != options.name:
                message = f"The model `{body.get('model')}` does not exist."
                return self._send(404, {"error": {"message": message}})
            if failure is not None:
                headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
                return self._send(failure, {"error": {"message": "injected"}}, headers)
            messages = tuple(body["messages"])
            with state.lock:
                state.asked.append(messages[-1]["content"])
            request = JudgeRequest(key="r", trajectory=0, step=None, messages=messages)
            with state.generate_lock:
                judge.params = dataclasses.replace(
                    params,
                    max_tokens=int(body.get("max_tokens") or 16),
                    temperature=float(body.get("temperature") or 0.0),
                    top_p=float(body.get("top_p") or 1.0),
                    seed=int(body.get("seed") or 0),
                    logprobs=bool(body.get("logprobs")),
                    top_logprobs=int(body.get("top_logprobs") or 0),
                )
                ids = judge.prompt_ids(messages)
                wanted = len(ids) + judge.params.max_tokens
                if wanted > context:
                    message = (
                        f"This model's maximum context length is {context} tokens."
                        f" However, you requested {wanted} tokens ({len(ids)} in the messages,"
                        f" {judge.params.max_tokens} in the completion)."
                    )
                    return self._send(400, {"error": {"message": message}})
                if fixed is not None:
                    reply_text, finish, tokens = fixed, "stop", self._fixed_tokens(fixed)
                    completion = len(tokens)
                else:
                    batch = judge.prepare([(request, ids)])[0]
                    reply = judge.decode(batch, judge.generate(batch), 0.0)[0]
                    reply_text, finish, completion = (
                        reply.text,
                        reply.finish_reason,
                        reply.completion_tokens,
                    )
                    tokens = [
                        {
                            "token": t.token,
                            "logprob": t.logprob,
                            "top_logprobs": [{"token": k, "logprob": v} for k, v in t.top.items()],
                        }
                        for t in reply.tokens or ()
                    ]
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": reply_text},
                "finish_reason": finish,
                "logprobs": {"content": tokens} if body.get("logprobs") else None,
            }
            self._send(
                200,
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": options.name,
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": len(ids),
                        "completion_tokens": completion,
                        "total_tokens": len(ids) + completion,
                    },
                },
            )

        def _fixed_tokens(self, text: str) -> list[dict[str, Any]]:
            ids = judge.tokenizer.encode(text, add_special_tokens=False)
            pieces = [judge.tokenizer.decode([i]) for i in ids]
            return [{"token": p, "logprob": 0.0, "top_logprobs": []} for p in pieces]

        def _send(
            self,
            status: int,
            payload: Any,
            headers: dict[str, str] | None = None,
            *,
            counted: bool = True,
        ) -> None:
            data = json.dumps(payload).encode()
            if counted:  # completions only, not /control and /stats
                self._leave()
                # Counted before the answer goes out: a client that has its reply may ask
                # for the stats at once, before this thread would run again.
                with state.lock:
                    state.statuses[str(status)] = state.statuses.get(str(status), 0) + 1
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
