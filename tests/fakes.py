"""The test doubles of the embedding port, in one place.

Fakes stand in for the model only in tests of pure logic (caching, batching, throughput
arithmetic); adapters and projections are tested with the real MiniLM (``CountingEmbedder``
wraps it to count what it is asked to embed).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import numpy as np

from memoryd.shared.adapters.embeddings import Embedder, Vectors


class HashEmbedder:
    """Embed each text as a deterministic unit vector (from its hash); record every call."""

    model_name = "fake-model"

    def __init__(self, dimension: int = 8) -> None:
        self.dimension = dimension
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return np.stack([self.vector_of(text) for text in texts])

    def vector_of(self, text: str) -> Vectors:
        """Return the vector ``embed`` gives ``text``."""
        digest = hashlib.sha256(text.encode()).digest()[: self.dimension]
        vector = np.frombuffer(digest, dtype=np.uint8).astype(np.float32) + 1.0
        return vector / np.linalg.norm(vector)


class SlowEmbedder:
    """Embed text t as a row of len(t), after a pause; record each call; fail on "boom"."""

    model_name = "slow-model"

    def __init__(self, dimension: int = 4, pause: float = 0.01) -> None:
        self.dimension = dimension
        self.pause = pause
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        await asyncio.sleep(self.pause)  # a model call takes time: concurrent callers pile up
        if "boom" in texts:
            raise RuntimeError("model failed")
        return np.array([[float(len(t))] * self.dimension for t in texts], dtype=np.float32)


class CountingEmbedder:
    """Pass calls to a real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.texts = 0
        self.asked: list[str] = []

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts += len(texts)
        self.asked += texts
        return await self.inner.embed(texts)
