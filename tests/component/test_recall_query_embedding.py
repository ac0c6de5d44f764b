"""Recall embeds a request's query once, begun before it reads the read models' versions.

The real MiniLM, a real Edge index and SQLite; the model is wrapped to count its texts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memoryd.services.bootstrap import build_model
from memoryd.services.recall.hybrid import HybridRetriever
from memoryd.services.recall.service import RecallService
from memoryd.services.recall.tiers import TierRecall
from memoryd.shared.adapters.embeddings import (
    BatchingEmbedder,
    CachedEmbedder,
    MemoryEmbeddingStore,
)
from memoryd.shared.adapters.index import EdgeSearchIndex
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.contracts.recall import RecallRequest, StreamWeights
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from memoryd.shared.settings import Settings
from tests.fakes import CountingEmbedder

pytestmark = pytest.mark.model

SCOPE = Scope(tenant="acme", user_id="alice", agent_id="bot", session_id="s1")


@pytest.fixture
async def service_and_model(
    tmp_path: Path,
) -> AsyncIterator[tuple[RecallService, CountingEmbedder]]:
    """A recall service over an empty index and empty read models, as the stack wires it."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}")
    await create_schema(engine)
    index = EdgeSearchIndex(tmp_path / "index", 384)
    await index.ensure_collection()
    model = CountingEmbedder(build_model(Settings(), "queries"))
    queries = CachedEmbedder(BatchingEmbedder(model), MemoryEmbeddingStore(100))
    sessions = session_factory(engine, writer=False)
    service = RecallService(
        sessions,
        HybridRetriever(index, queries, sessions),
        TierRecall(queries, DEFAULT_PARAMS),
        record=_no_visits,
    )
    yield service, model
    await index.close()
    await engine.dispose()


async def test_a_recall_embeds_its_query_once(
    service_and_model: tuple[RecallService, CountingEmbedder],
) -> None:
    """The early embedding and the dense stream's share one model call for the query."""
    service, model = service_and_model
    query = "What did I say about my greyhound?"

    answer = await service.answer(
        RecallRequest(scope=SCOPE, query=query, limit=10), datetime.now(UTC)
    )

    assert [] == answer.items
    assert [query] == model.asked


async def _no_visits(event: object) -> None:
    """Fail: no segment exists here, so recall has no visit to record."""
    raise AssertionError(f"unexpected visit {event!r}")


async def test_a_recall_without_the_dense_stream_asks_nothing_of_the_model(
    service_and_model: tuple[RecallService, CountingEmbedder],
) -> None:
    """BM25 alone needs no vector, and this user has no tiers: the model is not asked."""
    service, model = service_and_model
    bm25_only = StreamWeights(bm25=1.0, dense=0.0, graph=0.0)

    await service.answer(
        RecallRequest(scope=SCOPE, query="my greyhound", limit=10, weights=bm25_only),
        datetime.now(UTC),
    )

    assert [] == model.asked
