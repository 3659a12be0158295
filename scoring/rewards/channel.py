"""The reward service's Redis protocol, between web processes and reward workers.

- ``<prefix>rewards:queue``: a list of pending requests (JSON), pushed at the right by
  the web side, drained from the left by workers, up to N at a time.
- ``<prefix>rewards:answer:<id>``: one list per request, where the worker pushes the
  answer and the web side waits on it with ``BLPOP`` until the caller's deadline. It
  expires soon after, so an answer nobody waits for any more does not stay.
- ``<prefix>rewards:alive``: set by each worker's loop with a short expiry, so the web
  side can say at once that no worker runs instead of waiting out a deadline.
"""

# Django-free: the wire protocol, shared by the web side, the worker and the benchmark.
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis

# How long an answer waits for its reader, and how long a worker counts as alive after
# it last went round its loop (which it does at least every second when idle; a
# scorer's first load can take longer, hence the margin).
ANSWER_TTL_S = 60
ALIVE_TTL_S = 30
WAIT_SLICE_S = 2.0


def redis_connect(url: str, **options: Any) -> redis.Redis:
    """A client for the broker's URL (``redis://…``, or the embedded server's
    ``redis+socket:///path``, which redis-py spells ``unix:///path``)."""
    if url.startswith("redis+socket://"):
        url = "unix://" + url.removeprefix("redis+socket://")
    return redis.Redis.from_url(url, **options)


@dataclass(frozen=True)
class Refusal:
    """Why a request was not queued: HTTP ``status`` (503) and the caller's message,
    with the seconds to wait before trying again."""

    status: int
    message: str
    retry_after: int


class RewardChannel:
    def __init__(self, client: redis.Redis, *, prefix: str = "") -> None:
        self.client = client
        self.queue_key = f"{prefix}rewards:queue"
        self.alive_key = f"{prefix}rewards:alive"
        self.answer_prefix = f"{prefix}rewards:answer:"
        # A blocking read must end before the client's socket timeout (redis-py's
        # default is 5 s), or the client takes the quiet socket for a dead server.
        socket_timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        self.wait_slice = (
            WAIT_SLICE_S if not socket_timeout else min(WAIT_SLICE_S, socket_timeout / 2)
        )

    # The web side

    def submit(self, request: dict[str, Any], *, max_depth: int) -> str | Refusal:
        """Queue ``request`` (a new ``id`` is added) and return its id, or the refusal
        when no worker runs or ``max_depth`` requests wait already."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.exists(self.alive_key)
            pipe.llen(self.queue_key)
            alive, depth = pipe.execute()
        if not alive:
            return Refusal(
                503,
                "no reward worker is running; start one with `python manage.py reward_worker`"
                " (make run starts one)",
                retry_after=5,
            )
        if depth >= max_depth:
            return Refusal(
                503,
                f"the reward service is saturated: {depth} requests wait (the limit is"
                f" {max_depth}, STEPSCOPE_REWARDS_MAX_QUEUE); try again shortly",
                retry_after=1,
            )
        request_id = uuid.uuid4().hex
        self.client.rpush(self.queue_key, json.dumps({**request, "id": request_id}))
        return request_id

    def wait(self, request_id: str, *, deadline: float) -> dict[str, Any] | None:
        """The answer to ``request_id``, or None once ``deadline`` (``time.time()``) has
        passed without one."""
        key = self.answer_prefix + request_id
        while True:
            left = deadline - time.time()
            if left <= 0:
                return None
            # In slices (see __init__). BLPOP takes fractions of a second from Redis 6 on;
            # 0 would wait forever.
            popped = self.client.blpop([key], timeout=max(min(left, self.wait_slice), 0.01))
            if popped is not None:
                answer: dict[str, Any] = json.loads(popped[1])
                return answer

    def depth(self) -> int:
        return int(self.client.llen(self.queue_key))

    # The worker

    def beat(self) -> None:
        self.client.set(self.alive_key, "1", ex=ALIVE_TTL_S)

    def take(self, limit: int, *, block_s: float) -> list[dict[str, Any]]:
        """Up to ``limit`` requests, waiting up to ``block_s`` for the first one; those
        that came in the meantime are taken with it, to share one forward pass."""
        first = self.client.blpop([self.queue_key], timeout=min(block_s, self.wait_slice))
        if first is None:
            return []
        raw = [first[1]]
        if limit > 1:
            more: list[bytes] = self.client.lpop(self.queue_key, limit - 1) or []  # type: ignore[assignment]
            raw.extend(more)
        return [json.loads(item) for item in raw]

    def answer(self, request_id: str, answer: dict[str, Any]) -> None:
        key = self.answer_prefix + request_id
        with self.client.pipeline(transaction=False) as pipe:
            pipe.rpush(key, json.dumps(answer))
            pipe.expire(key, ANSWER_TTL_S)
            pipe.execute()
