"""Tests for SentenceTransformerEmbedder on the real bundled all-MiniLM-L6-v2."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio

import numpy as np
import pytest
from structlog.testing import capture_logs

from memoryd.shared.adapters.embeddings import (
    BatchingEmbedder,
    EmbeddingDimensionError,
    SentenceTransformerEmbedder,
    bundled_minilm_path,
)

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    """Share one loaded MiniLM across the module: loading is the slow part."""
    return SentenceTransformerEmbedder(batch_size=64)


async def test_vectors_are_float32_unit_rows_of_384(minilm: SentenceTransformerEmbedder) -> None:
    """Each text becomes one float32 row of 384 numbers with length one."""
    vectors = await minilm.embed(["The cat sat on the mat.", "Stocks fell sharply today."])

    assert ((2, 384), np.float32) == (vectors.shape, vectors.dtype)
    np.testing.assert_allclose([1.0, 1.0], np.linalg.norm(vectors, axis=1), atol=1e-5)


async def test_similar_sentences_score_higher_than_unrelated(
    minilm: SentenceTransformerEmbedder,
) -> None:
    """A paraphrase is closer (by cosine) than an unrelated sentence."""
    query, paraphrase, unrelated = await minilm.embed(
        [
            "I adopted a puppy last week.",
            "Last week I got a new dog from the shelter.",
            "The quarterly tax filing deadline is in April.",
        ]
    )

    assert float(query @ paraphrase) > float(query @ unrelated) + 0.3


async def test_a_batch_equals_the_texts_one_by_one(minilm: SentenceTransformerEmbedder) -> None:
    """Batching (with its padding) does not change any vector beyond 1e-5."""
    texts = [
        f"Turn {i}: we talked about {topic} for {i % 7 + 1} minutes." + " More detail." * (i % 5)
        for i, topic in enumerate(["hiking", "taxes", "my sister", "jazz", "python"] * 40)
    ]

    batched = await minilm.embed(texts)
    one_by_one = np.concatenate([await minilm.embed([text]) for text in texts])

    assert (200, 384) == batched.shape
    np.testing.assert_allclose(one_by_one, batched, atol=1e-5)


async def test_empty_input_gives_an_empty_matrix(minilm: SentenceTransformerEmbedder) -> None:
    """Embedding no texts returns zero rows of width 384."""
    assert (0, 384) == (await minilm.embed([])).shape


async def test_concurrent_first_calls_load_the_model_once() -> None:
    """Calls racing on a fresh embedder share one model load."""
    embedder = SentenceTransformerEmbedder()

    with capture_logs() as logs:
        results = await asyncio.gather(*(embedder.embed([f"text {i}"]) for i in range(4)))

    assert 1 == sum(entry["event"] == "embedding_model_loaded" for entry in logs)
    assert [(1, 384)] * 4 == [result.shape for result in results]


async def test_encoding_leaves_the_event_loop_free(minilm: SentenceTransformerEmbedder) -> None:
    """Other coroutines keep running while a large batch is encoded."""
    ticks = 0
    encoding = asyncio.ensure_future(minilm.embed([f"sentence {i} " * 20 for i in range(300)]))
    while not encoding.done():
        await asyncio.sleep(0.01)
        ticks += 1
    await encoding

    assert ticks >= 5


async def test_an_explicit_model_path_reports_its_dimension() -> None:
    """A model given by path is named after its folder unless named, and measured on load."""
    embedder = SentenceTransformerEmbedder(bundled_minilm_path(), model_name="minilm-copy")

    assert ("minilm-copy", 384) == (embedder.model_name, embedder.dimension)


async def test_a_configured_dimension_that_does_not_match_raises() -> None:
    """Declaring the wrong width fails on first use instead of corrupting the index."""
    embedder = SentenceTransformerEmbedder(bundled_minilm_path(), dimension=768)

    with pytest.raises(EmbeddingDimensionError, match="768"):
        await embedder.embed(["anything"])


async def test_batched_concurrent_queries_match_one_by_one(
    minilm: SentenceTransformerEmbedder,
) -> None:
    """Queries sharing a model call through BatchingEmbedder get the vectors asked alone."""
    queries = ["where do I live?", "what did Anna cook", "my sister's job", "dentist on Friday"]
    alone = [await minilm.embed([query]) for query in queries]

    shared = BatchingEmbedder(minilm)
    coalesced = await asyncio.gather(*(shared.embed([query]) for query in queries))

    for single, merged in zip(alone, coalesced, strict=True):
        np.testing.assert_allclose(single, merged, atol=1e-5)
