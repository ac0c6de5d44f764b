"""The embedding port: what the pipeline needs from any text embedding model."""

from collections.abc import Sequence
from typing import Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

Vectors: TypeAlias = npt.NDArray[np.float32]
"""A float32 matrix, one L2-normalised row per text, so a dot product is a cosine."""


class EmbeddingError(Exception):
    """An embedding backend answered something the pipeline cannot use."""


class EmbeddingDimensionError(EmbeddingError):
    """An embedding backend returned vectors of a width other than the one configured."""


class Embedder(Protocol):
    """Turn texts into unit vectors of a fixed dimension."""

    @property
    def model_name(self) -> str:
        """Name the model stably: it keys the embedding cache and is recorded in events."""
        ...

    @property
    def dimension(self) -> int:
        """Return the width of every vector this embedder produces."""
        ...

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one L2-normalised float32 row per text, shape (len(texts), dimension)."""
        ...
