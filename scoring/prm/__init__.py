"""Process reward models, Django-free: adapters that turn trajectory prefixes into one
probability per step, and the trained head.

Importing this package (and ``base``, ``prompts``, ``batching``,
``coalitions``) loads neither torch nor Django; ``adapters``, ``head``, ``saliency`` and
``tiny`` load torch and transformers. ``coalitions`` runs leave-one-out and Shapley credit
with a loaded scorer as the value function; ``saliency`` explains one step's score token
by token with integrated gradients (``captum``).
"""

from scoring.prm.base import (
    CHAT_TURN_LM,
    DEFAULT_ENCODER,
    EXTERNAL,
    KINDS,
    LLM_JUDGE,
    MODEL_KINDS,
    SEQUENCE_CLASSIFIER,
    STEP_TAG_LM,
    TOKEN_CLASSIFICATION,
    TRAINED_HEAD,
    ScorerError,
    ScorerParams,
    ScorerSpec,
    StepInput,
    StepResult,
    TrajectoryInput,
    params_for_kind,
)

__all__ = [
    "CHAT_TURN_LM",
    "DEFAULT_ENCODER",
    "EXTERNAL",
    "KINDS",
    "LLM_JUDGE",
    "MODEL_KINDS",
    "SEQUENCE_CLASSIFIER",
    "STEP_TAG_LM",
    "TOKEN_CLASSIFICATION",
    "TRAINED_HEAD",
    "ScorerError",
    "ScorerParams",
    "ScorerSpec",
    "StepInput",
    "StepResult",
    "TrajectoryInput",
    "params_for_kind",
]
