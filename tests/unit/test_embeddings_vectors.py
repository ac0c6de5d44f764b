"""Tests for the row normalisation and batching helpers."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import numpy as np
import pytest

from memoryd.shared.adapters.embeddings._vectors import chunked, empty_rows, unit_rows
from memoryd.shared.adapters.embeddings.port import EmbeddingDimensionError


def test_unit_rows_scales_every_row_to_length_one() -> None:
    """Rows come back as float32 unit vectors pointing the same way."""
    rows = unit_rows([[3.0, 4.0], [0.0, 2.0]], 2, source="test")

    assert np.float32 == rows.dtype
    np.testing.assert_allclose([[0.6, 0.8], [0.0, 1.0]], rows, atol=1e-7)


def test_unit_rows_keeps_a_zero_vector_zero() -> None:
    """A zero row stays zero instead of turning into NaN."""
    rows = unit_rows([[0.0, 0.0]], 2, source="test")

    assert [[0.0, 0.0]] == rows.tolist()


def test_unit_rows_rejects_a_wrong_width_naming_the_source() -> None:
    """A row of the wrong width raises an error that says who sent it."""
    with pytest.raises(EmbeddingDimensionError, match="endpoint-x"):
        unit_rows([[1.0, 2.0, 3.0]], 2, source="endpoint-x")


def test_empty_rows_has_the_dimension_as_width() -> None:
    """An empty result still has the embedder's width, so it stacks with others."""
    assert (0, 384) == empty_rows(384).shape


def test_chunked_covers_every_item_in_order() -> None:
    """Batches hold at most the batch size and together give back every item in order."""
    assert [[1, 2], [3, 4], [5]] == [list(batch) for batch in chunked([1, 2, 3, 4, 5], 2)]


def test_chunked_rejects_a_batch_size_below_one() -> None:
    """A zero batch size is refused rather than looping forever."""
    with pytest.raises(ValueError, match="at least 1"):
        list(chunked([1], 0))
