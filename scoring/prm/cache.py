"""The one cache of loaded models in a worker process, shared by every kind of GPU work
(scorers, policies): a GPU holds few models at once, so the least recently used model is
dropped when one more would pass ``MAX_LOADED``, whatever its kind. Django-free, so the
adapters and generators that fill it stay importable without settings."""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_LOADED = 2


class LoadedModels:
    def __init__(self, max_loaded: int = MAX_LOADED) -> None:
        self.max_loaded = max_loaded
        self._loaded: OrderedDict[str, Any] = OrderedDict()
        # Models built so far (tests check that a second use does not load again).
        self.loads = 0

    def get(self, key: str, build: Callable[[], T]) -> T:
        """The model under ``key``, built on first use and kept."""
        if key in self._loaded:
            self._loaded.move_to_end(key)
            loaded: T = self._loaded[key]
            return loaded
        model = build()
        self.loads += 1
        self._loaded[key] = model
        while len(self._loaded) > self.max_loaded:
            self._loaded.popitem(last=False)
            _free_memory()
        return model

    def __len__(self) -> int:
        return len(self._loaded)


def _free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


LOADED = LoadedModels()
