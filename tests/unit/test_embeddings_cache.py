"""Tests for CachedEmbedder's de-duplication, ordering and stats, and the LRU memory store."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio
import hashlib

import numpy as np

from memoryd.shared.adapters.embeddings import (
    CachedEmbedder,
    CacheStats,
    MemoryEmbeddingStore,
    content_hash,
)
from tests.fakes import HashEmbedder, SlowEmbedder

DIMENSION = 8


async def test_rows_come_back_in_input_order_with_duplicates() -> None:
    """Each input text gets its own vector, in order, even when texts repeat."""
    cache = CachedEmbedder(HashEmbedder(DIMENSION), MemoryEmbeddingStore())
    texts = ["b", "a", "b", "c"]

    vectors = await cache.embed(texts)

    np.testing.assert_array_equal(
        np.stack([HashEmbedder(DIMENSION).vector_of(text) for text in texts]), vectors
    )


async def test_duplicates_within_a_call_are_embedded_once() -> None:
    """The model sees each distinct text once per call."""
    inner = HashEmbedder(DIMENSION)

    await CachedEmbedder(inner, MemoryEmbeddingStore()).embed(["x", "y", "x", "x"])

    assert [["x", "y"]] == inner.calls


async def test_a_text_another_call_is_embedding_is_waited_for_not_embedded_again() -> None:
    """Two calls at once for one query: the model sees it once, both get its vector."""
    inner = SlowEmbedder(DIMENSION)
    cache = CachedEmbedder(inner, MemoryEmbeddingStore())

    first, second = await asyncio.gather(
        cache.embed(["the query"]), cache.embed(["the query", "x"])
    )

    assert [["the query"], ["x"]] == inner.calls
    np.testing.assert_array_equal(first[0], second[0])


async def test_a_failed_embedding_reaches_the_calls_that_waited_for_it() -> None:
    """A call waiting on another's text gets that model's error; the text is not held."""
    inner = SlowEmbedder(DIMENSION)
    cache = CachedEmbedder(inner, MemoryEmbeddingStore())

    failed = await asyncio.gather(
        cache.embed(["boom"]), cache.embed(["boom"]), return_exceptions=True
    )
    inner.calls.clear()

    assert [RuntimeError, RuntimeError] == [type(error) for error in failed]
    assert [] == [text for text in ["boom"] if text in inner.calls]
    assert 1 == len(await cache.embed(["fine"]))


async def test_a_later_batch_failing_leaves_the_stored_batches_to_their_waiters() -> None:
    """Misses go to the model in batches: a call waiting on a text of a batch that was
    stored gets its vector even when a later batch of the same call fails."""
    inner = SlowEmbedder(DIMENSION)
    cache = CachedEmbedder(inner, MemoryEmbeddingStore(), batch_size=2)

    owner = asyncio.ensure_future(cache.embed(["one", "two", "boom"]))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(cache.embed(["two"]))
    outcomes = await asyncio.gather(owner, waiter, return_exceptions=True)

    assert RuntimeError is type(outcomes[0])
    np.testing.assert_array_equal(np.full((1, DIMENSION), 3.0), outcomes[1])
    assert [["one", "two"], ["boom"]] == inner.calls  # the waiter did not embed "two" again
    assert 2 == (await cache.embed(["one", "two"])).shape[0]
    assert [["one", "two"], ["boom"]] == inner.calls  # both were stored by the failed call


async def test_a_call_waiting_on_a_cancelled_one_embeds_the_text_itself() -> None:
    """Cancelling the call that was embedding a text does not fail the call waiting on it."""
    inner = SlowEmbedder(DIMENSION)
    cache = CachedEmbedder(inner, MemoryEmbeddingStore())

    owner = asyncio.ensure_future(cache.embed(["the query"]))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(cache.embed(["the query"]))
    await asyncio.sleep(0)
    owner.cancel()

    assert (1, DIMENSION) == (await waiter).shape
    assert [["the query"], ["the query"]] == inner.calls


async def test_a_second_call_embeds_only_new_texts() -> None:
    """Texts seen before are served from the store; only new ones reach the model."""
    inner = HashEmbedder(DIMENSION)
    cache = CachedEmbedder(inner, MemoryEmbeddingStore())

    await cache.embed(["one", "two"])
    await cache.embed(["two", "three", "one"])

    assert [["one", "two"], ["three"]] == inner.calls
    assert CacheStats(hits=2, misses=3) == cache.stats


async def test_misses_are_sent_in_batches() -> None:
    """Misses reach the model in batches no larger than the batch size."""
    inner = HashEmbedder(DIMENSION)
    cache = CachedEmbedder(inner, MemoryEmbeddingStore(), batch_size=2)

    await cache.embed(["a", "b", "c", "d", "e"])

    assert [["a", "b"], ["c", "d"], ["e"]] == inner.calls


async def test_empty_input_makes_no_model_call() -> None:
    """Embedding nothing returns an empty matrix of the right width without a model call."""
    inner = HashEmbedder(DIMENSION)

    vectors = await CachedEmbedder(inner, MemoryEmbeddingStore()).embed([])

    assert (0, DIMENSION) == vectors.shape
    assert [] == inner.calls


def test_hit_rate_is_the_share_of_hits() -> None:
    """The hit rate is hits over lookups, and zero before any lookup."""
    assert 0.75 == CacheStats(hits=3, misses=1).hit_rate
    assert 0.0 == CacheStats().hit_rate


async def test_cache_reports_the_inner_model_identity() -> None:
    """The cache embeds as the inner model, so events record the real model."""
    cache = CachedEmbedder(HashEmbedder(DIMENSION), MemoryEmbeddingStore())

    assert ("fake-model", DIMENSION) == (cache.model_name, cache.dimension)


async def test_memory_store_evicts_the_least_recently_used() -> None:
    """Over capacity, the entry unused for longest goes first; a read counts as a use."""
    store = MemoryEmbeddingStore(max_entries=2)
    await store.put_many(
        "m",
        {"a": HashEmbedder(DIMENSION).vector_of("a"), "b": HashEmbedder(DIMENSION).vector_of("b")},
    )
    await store.get_many("m", ["a"])

    await store.put_many("m", {"c": HashEmbedder(DIMENSION).vector_of("c")})

    assert ["a", "c"] == sorted(await store.get_many("m", ["a", "b", "c"]))
    assert 2 == len(store)


async def test_memory_store_keeps_models_apart() -> None:
    """A vector stored for one model is not returned for another."""
    store = MemoryEmbeddingStore()
    await store.put_many("model-1", {"k": HashEmbedder(DIMENSION).vector_of("k")})

    assert {} == await store.get_many("model-2", ["k"])


def test_content_hash_is_the_sha256_of_the_utf8_text() -> None:
    """The key is stable across processes: the hex sha256 of the UTF-8 bytes."""
    assert hashlib.sha256("héllo".encode()).hexdigest() == content_hash("héllo")
