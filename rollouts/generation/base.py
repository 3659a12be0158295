"""Plain data for policies: what a policy is, what it is asked to continue and what it
returns. Nothing here imports torch or Django, so services, serializers and the admin
can validate a policy's parameters without loading a model."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from scoring.prm.params import params_build, spec_key

PROMPT_FORMATS = ("plain", "chat")
DTYPES = ("auto", "fp32", "bf16", "fp16")
BACKENDS = ("auto", "transformers", "vllm")
# Why a continuation ended: the model's end-of-sequence token, one of the policy's stop
# strings, or the max_new_tokens limit (an unfinished continuation).
EOS, STOP, LENGTH = "eos", "stop", "length"


class Cancelled(Exception):
    """Generation was asked to end early (its job was cancelled)."""


class PolicyError(Exception):
    """A policy cannot run as configured (bad parameters, a model that will not load, a
    chat template that cannot hold the prefix, ...)."""


@dataclass(frozen=True)
class PolicyParams:
    """Everything about a policy besides its model reference."""

    # How a prefix becomes the prompt. ``plain``: ``task_format`` then each step through
    # ``step_format``, ``step_join`` between steps and after the last one, so the model
    # starts the next step. ``chat``: the task as the user turn and the steps as the
    # assistant turn of the tokenizer's chat template, continued in place.
    prompt_format: str = "plain"
    system_prompt: str = ""
    task_format: str = "{task}\n\n"
    step_format: str = "{content}"
    # Also how generated text is cut into steps.
    step_join: str = "\n\n"
    # Sampling. temperature 0 is greedy decoding (every sample the same).
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 512
    # Generation ends at the first of these; the stop string itself is not kept.
    stop: tuple[str, ...] = ()
    # Prompt plus new tokens; a longer prompt loses tokens from the left (reported).
    max_length: int = 4096
    batch_size: int = 32
    dtype: str = "auto"
    device: str = "auto"
    backend: str = "auto"
    # Continuations per Celery task: a killed worker loses at most this many.
    chunk_continuations: int = 64
    # torch's intra-op threads while generating on CPU; 0 leaves torch's own setting.
    # A small model gains little from more than one (the demo policy: 15% with two on
    # a quiet two-core machine), and on a busy machine threads that wait on each other
    # made its generation ten times slower (bench/rollouts.py --cpu-threads).
    cpu_threads: int = 0

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["stop"] = list(self.stop)
        return values


def policy_params(raw: dict[str, Any] | None = None) -> PolicyParams:
    """Validated parameters: the defaults overlaid with ``raw``. Unknown names and
    wrongly typed values raise :class:`PolicyError` naming the parameter."""
    params = params_build(
        PolicyParams, raw, noun="policy", error=PolicyError, convert={"stop": _stop}
    )
    _check_choices(params)
    return params


def _stop(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple) and all(isinstance(s, str) and s for s in value):
        return tuple(value)
    raise PolicyError("parameter 'stop' must be a list of non-empty strings")


def _check_choices(params: PolicyParams) -> None:
    choices = {"prompt_format": PROMPT_FORMATS, "dtype": DTYPES, "backend": BACKENDS}
    for name, allowed in choices.items():
        if getattr(params, name) not in allowed:
            raise PolicyError(f"parameter {name!r} must be one of {', '.join(allowed)}")
    for name in ("max_new_tokens", "max_length", "batch_size", "chunk_continuations"):
        if getattr(params, name) < 1:
            raise PolicyError(f"parameter {name!r} must be at least 1")
    if params.max_new_tokens >= params.max_length:
        raise PolicyError("'max_new_tokens' must be below 'max_length' to leave room for a prompt")
    if params.cpu_threads < 0:
        raise PolicyError("parameter 'cpu_threads' cannot be negative")
    if params.temperature < 0:
        raise PolicyError("parameter 'temperature' cannot be negative")
    if not 0 < params.top_p <= 1:
        raise PolicyError("parameter 'top_p' must be in (0, 1]")
    if params.top_k < 0:
        raise PolicyError("parameter 'top_k' cannot be negative")
    if not params.step_join:
        raise PolicyError("parameter 'step_join' cannot be empty: it separates the steps")
    if params.device not in {"auto", "cpu", "cuda", "mps"} and not params.device.startswith(
        "cuda:"
    ):
        raise PolicyError("parameter 'device' must be auto, cpu, cuda, cuda:N or mps")
    for name in ("task_format", "step_format"):
        try:
            getattr(params, name).format(task="", content="", role="", index=0, number=1)
        except (KeyError, IndexError, ValueError) as error:
            raise PolicyError(f"parameter {name!r} is not a valid format string: {error}") from None


@dataclass(frozen=True)
class PolicySpec:
    """A policy as a worker loads it. ``key`` tells cached models apart."""

    model_ref: str
    params: PolicyParams = field(default_factory=PolicyParams)
    revision: str = ""
    trust_remote_code: bool = False

    @property
    def key(self) -> str:
        return spec_key(
            self.model_ref, self.revision, self.trust_remote_code, self.params.to_dict()
        )


@dataclass(frozen=True)
class PrefixStep:
    """A stored step as the policy sees it."""

    content: str
    role: str = "assistant"
    kind: str = "thought"


@dataclass(frozen=True)
class Request:
    """Continue the prefix (the task and ``steps``) ``samples`` times. ``first_sample``
    numbers them, so a branch split over several chunks numbers its samples apart."""

    key: int
    task: str
    steps: tuple[PrefixStep, ...]
    samples: int
    first_sample: int = 0
    seed: int = 0


@dataclass(frozen=True)
class Continuation:
    key: int  # the request's key
    sample: int
    text: str  # the generated text, cut at a stop string
    steps: tuple[str, ...]  # ``text`` cut into steps at ``step_join``
    finish_reason: str  # EOS, STOP or LENGTH
    new_tokens: int
    prompt_tokens: int
    # Prompt tokens cut from the left to fit ``max_length``.
    dropped_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason != LENGTH
