"""Row normalisation and batching shared by the embedders."""

from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from .port import EmbeddingDimensionError, Vectors

T = TypeVar("T")


def empty_rows(dimension: int) -> Vectors:
    """Return a matrix of no rows and `dimension` columns."""
    return np.empty((0, dimension), dtype=np.float32)


def unit_rows(vectors: npt.ArrayLike, dimension: int, *, source: str) -> Vectors:
    """Return `vectors` as float32 rows of length one, refusing a width other than `dimension`."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise EmbeddingDimensionError(
            f"{source} returned vectors of shape {matrix.shape}; expected (n, {dimension})"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # A zero vector has no direction: keep it zero instead of dividing into NaN.
    unit: Vectors = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


def chunked(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Yield consecutive slices of `items` holding at most `size` items each."""
    if size < 1:
        raise ValueError(f"batch size must be at least 1, got {size}")
    for start in range(0, len(items), size):
        yield items[start : start + size]
