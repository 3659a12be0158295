"""Step labels as exports read them: the neutral mapping and label-to-bool helpers.

A resolved label is -1 (bad), 0 (neutral or unsure), +1 (good) or None (no label from
the chosen label source). Projects disagree on what a neutral step teaches, so an export
always names its mapping (``--neutral``) and the builders apply it here, never
implicitly.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exports.writers.inputs import ExportStep

LABEL_VALUES = (-1, 0, 1)


class Neutral(StrEnum):
    """What a neutral (0) label becomes in an export.

    ``keep`` leaves it 0; it suits the formats that have a neutral value (PRM800K
    ratings, RL step rewards, DPO label margins) and is refused by the formats whose
    labels are booleans (``trl-stepwise``, ``kto``).
    """

    POSITIVE = "positive"
    NEGATIVE = "negative"
    DROP = "drop"
    KEEP = "keep"


def parse_neutral(value: str | Neutral) -> Neutral:
    try:
        return Neutral(value)
    except ValueError:
        choices = ", ".join(member.value for member in Neutral)
        raise ValueError(f"unknown neutral mapping {value!r}; expected one of {choices}") from None


def map_label(value: int | None, neutral: Neutral) -> int | None:
    """``value`` with the neutral mapping applied: -1, +1, 0 (only with ``keep``) or
    None (no label, or a neutral label dropped)."""
    if value is None:
        return None
    if value not in LABEL_VALUES or isinstance(value, bool):
        raise ValueError(f"label {value!r} is not one of -1, 0, 1")
    if value != 0:
        return value
    if neutral is Neutral.POSITIVE:
        return 1
    if neutral is Neutral.NEGATIVE:
        return -1
    if neutral is Neutral.DROP:
        return None
    return 0


def label_to_bool(value: int) -> bool:
    """+1 is True and -1 is False. A neutral label has no boolean: map it first."""
    if value == 1 and not isinstance(value, bool):
        return True
    if value == -1:
        return False
    raise ValueError(
        f"label {value!r} has no boolean; map neutral labels with positive, negative or drop"
    )


def mapped_bool(value: int | None, neutral: Neutral) -> bool | None:
    """The boolean a binary format writes for ``value``, or None for no label."""
    mapped = map_label(value, neutral)
    return None if mapped is None else label_to_bool(mapped)


def first_error_position(steps: Sequence[ExportStep], neutral: Neutral) -> int | None:
    """The position in ``steps`` of the first labelable step whose mapped label is -1,
    or None when no step is known to be wrong.

    The first error comes from the resolved step labels, so it always agrees with the
    labels the same export writes, whatever the label source.
    """
    for position, step in enumerate(steps):
        if step.labelable and map_label(step.label, neutral) == -1:
            return position
    return None
