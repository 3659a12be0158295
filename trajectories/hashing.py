"""Content and prefix hashes for trajectories (no Django).

``prefix_hash`` of step *i* chains the hash of step *i-1* with step *i*'s content, rooted
at the task text, so rollouts of one task that share their first *i* steps share prefix
hashes: the prefix tree, Monte Carlo values and sibling comparisons become plain SQL.
``content_hash`` identifies a whole trajectory (task, steps, outcome, source id), so
re-importing the same record changes nothing.
"""

# Django-free: the helper process and the formats hash without a database.
from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import orjson

from trajectories.formats.base import ParsedStep, ParsedTrajectory, imported_annotator_name


def _canonical(value: Any) -> bytes:
    """``value`` as sorted, compact JSON: the bytes of :func:`_canonical_json`, which
    every stored hash was made from, made about twenty times faster by orjson.

    orjson writes exactly what ``json.dumps`` does here (strings, escapes, integers,
    floats from 1e-4 up), except floats below 1e-4, which ``json`` writes as ``1e-05``
    and orjson as ``0.00001`` or ``1e-5``: output that may hold one (or a string that
    looks like one) is made by ``json``, and so is any value orjson refuses (integers
    beyond 64 bits, keys that are not strings, types ``json`` does not write either).
    ``tests/trajectories/test_hashing.py`` compares the two on many values."""
    try:
        encoded = orjson.dumps(value, option=_ORJSON_SORTED)
    except TypeError:
        return _canonical_json(value)
    if b"e-" in encoded or b"0.0000" in encoded:
        return _canonical_json(value)
    return encoded


def _canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


# Sorted keys; dataclasses, dates and subclasses of str, int, dict and list refused (to
# json.dumps, which writes them as it always did, or refuses them too).
_ORJSON_SORTED = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _field(value: str) -> bytes:
    data = value.encode()
    return len(data).to_bytes(8, "big") + data


def _step_bytes(step: ParsedStep) -> bytes:
    """The step's identity fields, each length-prefixed so no two steps collide."""
    tool_args = b"" if step.tool_args is None else _canonical_json(step.tool_args)
    return b"".join(
        (
            _field(step.kind),
            _field(step.role),
            _field(step.agent),
            _field(step.content),
            _field(step.tool_name),
            len(tool_args).to_bytes(8, "big") + tool_args,
        )
    )


def prefix_hashes(task: str, steps: list[ParsedStep], after: str = "") -> list[str]:
    """The chained hash of each step; the same bytes as :func:`_step_bytes` hashes,
    built faster. ``after``, the hash of the step before the first of ``steps``, goes
    on from there (steps appended to a trajectory).

    A large import hashes every step, so this is written for speed: the short fields
    that repeat from step to step (kind, role, agent; tool name when there are no
    arguments) are encoded once and remembered, leaving one encode and one sha256 call
    per step.
    """
    fresh = _SHA256.copy
    heads = _HEADS
    hashes = []
    current = bytes.fromhex(after) if after else hashlib.sha256(b"task" + _field(task)).digest()
    for step in steps:
        key = (step.kind, step.role, step.agent)
        head = heads.get(key)
        if head is None:
            head = _field(step.kind) + _field(step.role) + _field(step.agent)
            if len(heads) < _REMEMBERED:
                heads[key] = head
        content = step.content.encode()
        if step.tool_args is None:
            tail = _TOOLLESS.get(step.tool_name)
            if tail is None:
                tail = _field(step.tool_name) + _NO_ARGUMENTS
                if len(_TOOLLESS) < _REMEMBERED:
                    _TOOLLESS[step.tool_name] = tail
        else:
            arguments = _canonical(step.tool_args)
            tail = _field(step.tool_name) + len(arguments).to_bytes(8, "big") + arguments
        digest = fresh()
        digest.update(b"".join((current, head, len(content).to_bytes(8, "big"), content, tail)))
        current = digest.digest()
        hashes.append(current.hex())
    return hashes


# Encoded (kind, role, agent) and argument-less tool names, bounded so that a file with
# many distinct agents cannot grow them without end.
_REMEMBERED = 4096
_HEADS: dict[tuple[str, str, str], bytes] = {}
_TOOLLESS: dict[str, bytes] = {}
_NO_ARGUMENTS = (0).to_bytes(8, "big")
# Copied for each hash rather than made anew: hashlib.sha256() looks the algorithm up
# in OpenSSL every time, which took longer than hashing a step's few hundred bytes.
_SHA256 = hashlib.sha256()


def content_hash(
    trajectory: ParsedTrajectory, source_format: str, step_hashes: list[str] | None = None
) -> str:
    """Covers everything imported: the chained step hash, per-step flags and metadata,
    labels, outcome and trajectory fields. ``step_hashes`` saves recomputing them."""
    steps = (
        step_hashes if step_hashes is not None else prefix_hashes(trajectory.task, trajectory.steps)
    )
    digest = _SHA256.copy()
    digest.update(steps[-1].encode() if steps else b"")
    fields: list[Any] = [
        source_format,
        trajectory.external_id,
        trajectory.task_key,
        trajectory.ground_truth,
        trajectory.model_name,
        trajectory.outcome_reward,
        trajectory.success,
        trajectory.first_error_index,
        trajectory.parent_external_id,
        trajectory.branch_index,
        trajectory.metadata,
    ]
    # Training facts count only where a record has them, so the hashes of every
    # trajectory stored before they existed stay what they were.
    if trajectory.policy_version is not None or trajectory.training_step is not None:
        fields.append([trajectory.policy_version, trajectory.training_step])
    if any(step.training is not None for step in trajectory.steps):
        facts = [None if s.training is None else s.training.as_dict() for s in trajectory.steps]
        fields.append(facts)
    # The annotator as the user it becomes: ``stepscope`` (how an export writes the
    # default ``import:stepscope``) hashes like ``import:stepscope``, so an exported
    # record pushed back finds the trajectory it came from.
    labels = [
        [label.step_index, label.value, imported_annotator_name(label.annotator)]
        for label in trajectory.labels
    ]
    reward = trajectory.outcome_reward
    # orjson writes NaN and infinities as null: a reward that is one (PostgreSQL stores
    # it) must not hash like no reward. (Anywhere else they fail the import.)
    canonical = _canonical if reward is None or math.isfinite(reward) else _canonical_json
    if any(step.metadata for step in trajectory.steps):
        flags = [[step.labelable, step.metadata or None] for step in trajectory.steps]
        digest.update(canonical([*fields, flags, labels]))
    else:
        # The usual case, written out: the same bytes _canonical gives for the flags
        # of steps without metadata, without encoding a list per step.
        head = canonical(fields)[:-1]
        flags_text = ",".join([_PLAIN_FLAGS[step.labelable] for step in trajectory.steps])
        tail = _canonical(labels) if labels else b"[]"
        digest.update(b"".join((head, b",[", flags_text.encode(), b"],", tail, b"]")))
    return digest.hexdigest()


_PLAIN_FLAGS = {True: "[true,null]", False: "[false,null]"}
