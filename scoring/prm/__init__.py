"""Process reward models, Django-free: adapters that turn trajectory prefixes into one
probability per step, and the trained head.

Importing this package (and ``base``, ``kinds``, ``params``, ``prompts``, ``batching``,
``coalitions``) loads neither torch nor Django; ``adapters``, ``head``, ``saliency`` and
``tiny`` load torch and transformers. ``kinds`` declares every scorer kind once (the
registry the model's choices, the forms and the services read); ``params`` is the typed
parameter validator scorers, judges and policies share. ``coalitions`` runs leave-one-out
and Shapley credit with a loaded scorer as the value function; ``saliency`` explains one
step's score token by token with integrated gradients (``captum``).
"""

from scoring.prm.base import (
    DEFAULT_ENCODER,
    ScorerError,
    ScorerParams,
    ScorerSpec,
    StepInput,
    StepResult,
    TrajectoryInput,
)
from scoring.prm.kinds import (
    CHAT_TURN_LM,
    EXTERNAL,
    LLM_JUDGE,
    SEQUENCE_CLASSIFIER,
    STEP_TAG_LM,
    TOKEN_CLASSIFICATION,
    TRAINED_HEAD,
    ScorerKind,
    kind_choices,
    kind_get,
    kind_list,
    kind_register,
    params_for_kind,
)

__all__ = [
    "CHAT_TURN_LM",
    "DEFAULT_ENCODER",
    "EXTERNAL",
    "LLM_JUDGE",
    "SEQUENCE_CLASSIFIER",
    "STEP_TAG_LM",
    "TOKEN_CLASSIFICATION",
    "TRAINED_HEAD",
    "ScorerError",
    "ScorerKind",
    "ScorerParams",
    "ScorerSpec",
    "StepInput",
    "StepResult",
    "TrajectoryInput",
    "kind_choices",
    "kind_get",
    "kind_list",
    "kind_register",
    "params_for_kind",
]
