"""Tests for BatchingEmbedder: concurrent calls share model calls, each gets its own rows."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from memoryd.shared.adapters.embeddings import BatchingEmbedder, Vectors
from tests.fakes import SlowEmbedder

DIMENSION = 4


def _rows(texts: Sequence[str]) -> Vectors:
    return np.array([[float(len(t))] * DIMENSION for t in texts], dtype=np.float32)


async def test_concurrent_callers_share_model_calls_and_get_their_own_rows() -> None:
    """Eight callers at once: fewer than eight model calls, each caller's rows in its order."""
    inner = SlowEmbedder()
    batching = BatchingEmbedder(inner)
    asks = [["a" * n, "b" * (n + 10)] for n in range(1, 9)]

    answers = await asyncio.gather(*(batching.embed(texts) for texts in asks))

    for texts, rows in zip(asks, answers, strict=True):
        np.testing.assert_array_equal(_rows(texts), rows)
    assert len(inner.calls) < len(asks)


async def test_a_model_call_holds_at_most_max_texts() -> None:
    """Waiting calls are split so no model call exceeds max_texts (one big call goes alone)."""
    inner = SlowEmbedder()
    batching = BatchingEmbedder(inner, max_texts=3)

    await asyncio.gather(*(batching.embed([f"t{n}", f"u{n}"]) for n in range(5)))
    await batching.embed(["x"] * 7)

    assert all(len(call) <= 3 for call in inner.calls[:-1])
    assert 7 == len(inner.calls[-1])


async def test_a_model_error_reaches_its_callers_and_later_calls_still_work() -> None:
    """The callers of a failed model call see its error; the next call is answered."""
    batching = BatchingEmbedder(SlowEmbedder())

    results = await asyncio.gather(
        batching.embed(["boom"]), batching.embed(["fine"]), return_exceptions=True
    )
    after = await batching.embed(["again"])

    assert all(isinstance(result, RuntimeError) for result in results)
    np.testing.assert_array_equal(_rows(["again"]), after)


async def test_a_cancelled_caller_does_not_break_the_others() -> None:
    """A caller that gives up is skipped; the callers beside it get their rows."""
    batching = BatchingEmbedder(SlowEmbedder())
    doomed = asyncio.ensure_future(batching.embed(["gone"]))
    kept = asyncio.ensure_future(batching.embed(["kept"]))
    await asyncio.sleep(0)
    doomed.cancel()

    rows = await kept

    np.testing.assert_array_equal(_rows(["kept"]), rows)
    with pytest.raises(asyncio.CancelledError):
        await doomed


async def test_no_texts_needs_no_model_call() -> None:
    """An empty call returns an empty matrix of the model's width."""
    inner = SlowEmbedder()

    rows = await BatchingEmbedder(inner).embed([])

    assert ((0, DIMENSION), []) == (rows.shape, inner.calls)
