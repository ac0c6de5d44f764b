"""Recall embeds a request's query once, begun before it reads the read models' versions.

The real MiniLM, a real Edge index and SQLite; the model is wrapped to count its calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
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
    Embedder,
    MemoryEmbeddingStore,
)
from memoryd.shared.adapters.embeddings.port import Vectors
from memoryd.shared.adapters.index import EdgeSearchIndex
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.contracts.recall import RecallRequest
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from memoryd.shared.settings import Settings

pytestmark = pytest.mark.model

SCOPE = Scope(tenant="acme", user_id="alice", agent_id="bot", session_id="s1")


class Counting:
    """The model, with every text it was asked to embed recorded, call by call."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return await self.inner.embed(texts)


@pytest.fixture
async def service_and_model(tmp_path: Path) -> AsyncIterator[tuple[RecallService, Counting]]:
    """A recall service over an empty index and empty read models, as the stack wires it."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}")
    await create_schema(engine)
    index = EdgeSearchIndex(tmp_path / "index", 384)
    await index.ensure_collection()
    model = Counting(build_model(Settings(), "queries"))
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
    service_and_model: tuple[RecallService, Counting],
) -> None:
    """The early embedding and the dense stream's share one model call for the query."""
    service, model = service_and_model
    query = "What did I say about my greyhound?"

    answer = await service.answer(
        RecallRequest(scope=SCOPE, query=query, limit=10), datetime.now(UTC)
    )

    assert [] == answer.items
    assert [[query]] == model.calls


async def _no_visits(event: object) -> None:
    """Fail: no segment exists here, so recall has no visit to record."""
    raise AssertionError(f"unexpected visit {event!r}")
