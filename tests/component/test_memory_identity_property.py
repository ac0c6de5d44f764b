"""Property: after forget, no read model, index point or recall response holds the content.

Any client-supplied ids, any sequence of remember / forget of a few keys, folded by the real
memories, indexer and graph projections into real SQLite and a real Qdrant Edge index (MiniLM
embeddings); the graph records its extractions in an in-memory decision log and folds them.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from memoryd.services.bootstrap import build_model
from memoryd.services.graph.projection import GraphProjection
from memoryd.services.indexer.projection import IndexerProjection
from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.recall.hybrid import HybridRetriever
from memoryd.services.recall.service import RecallService
from memoryd.services.recall.tiers import TierRecall
from memoryd.services.runtime.decisions import MemoryDecisionLog
from memoryd.services.runtime.projection import Positioned, Projection, apply_once
from memoryd.shared.adapters.embeddings import CachedEmbedder, Embedder, SqlEmbeddingStore
from memoryd.shared.adapters.index import EdgeSearchIndex, ScopeFilter
from memoryd.shared.adapters.llm import OfflineExtractor
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.adapters.sql.tables import graph_items, memories
from memoryd.shared.contracts.events import Event, MemoryForgotten, MemoryRemembered
from memoryd.shared.contracts.recall import RecallRequest
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memories import memory_id_for_key
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from memoryd.shared.settings import Settings

pytestmark = pytest.mark.model

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="alice", agent_id="bot", session_id="s1")
KEYS = ("diet", "home", "pet")
WORDS = ("zucchini", "harbour", "parakeet", "violin", "glacier", "saffron", "tram", "quilt")

_model: list[Embedder] = []


def minilm() -> Embedder:
    """Load MiniLM once for every example."""
    if not _model:
        _model.append(build_model(Settings()))
    return _model[0]


@dataclass
class CollectingPublisher:
    """Stand in for the log's publisher: derived events are appended to the local log."""

    published: list[Event] = field(default_factory=list)

    async def publish_many(self, events: Sequence[Event]) -> list[int]:
        self.published.extend(events)
        return []


@dataclass
class LocalLog:
    """A log in memory, folded by several projections in order, derived events included."""

    events: list[Event] = field(default_factory=list)

    async def settle(self, sessions: object, projections: Sequence[Projection]) -> None:
        done = dict.fromkeys((p.consumer for p in projections), 0)
        while any(done[p.consumer] < len(self.events) for p in projections):
            for projection in projections:
                start = done[projection.consumer]
                batch = [Positioned(e, n + 1) for n, e in enumerate(self.events) if n >= start]  # type: ignore[arg-type]
                publisher = CollectingPublisher()
                await apply_once(sessions, projection, batch, publisher)  # type: ignore[arg-type]
                done[projection.consumer] = len(self.events)
                self.events += publisher.published


remember_op = st.tuples(
    st.just("remember"), st.sampled_from(KEYS), st.one_of(st.uuids(), st.none())
)
forget_op = st.tuples(
    st.sampled_from(["forget_key", "forget_id"]), st.sampled_from(KEYS), st.none()
)
operations = st.lists(st.one_of(remember_op, forget_op), min_size=1, max_size=8)


def content(n: int, key: str) -> str:
    return f"Alice {key} {WORDS[n % len(WORDS)]} number{n}"


async def scenario(ops: list[tuple[str, str, uuid.UUID | None]], folder: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{folder / 'memoryd.db'}")
    cache = create_engine(f"sqlite+aiosqlite:///{folder / 'embeddings.db'}")
    index = EdgeSearchIndex(folder / "index", 384)
    try:
        await create_schema(engine)
        store = SqlEmbeddingStore(cache)
        await store.create_schema()
        await index.ensure_collection()
        sessions = session_factory(engine)
        embedder = CachedEmbedder(minilm(), store)
        projections: list[Projection] = [
            MemoriesProjection(30),
            IndexerProjection(index, embedder),  # type: ignore[arg-type]
            GraphProjection(OfflineExtractor(), MemoryDecisionLog()),
        ]
        log = LocalLog()
        live: dict[str, str] = {}
        gone: set[str] = set()
        for n, (op, key, client_id) in enumerate(ops):
            at = T0 + timedelta(minutes=n)
            if op == "remember":
                text = content(n, key)
                if key in live:
                    gone.add(live[key])
                live[key] = text
                log.events.append(
                    MemoryRemembered(
                        occurred_at=at, scope=SCOPE, memory_id=client_id, key=key, content=text
                    )
                )
            else:
                if key in live:
                    gone.add(live.pop(key))
                forget = (
                    MemoryForgotten(occurred_at=at, scope=SCOPE, key=key)
                    if op == "forget_key"
                    # the id the SDK's remember returned for this key
                    else MemoryForgotten(
                        occurred_at=at, scope=SCOPE, memory_id=memory_id_for_key(SCOPE, key)
                    )
                )
                log.events.append(forget)
        await log.settle(sessions, projections)

        async with sessions() as session:
            rows = [r.content for r in await session.execute(select(memories.c.content))]
            graph = [
                r.text
                for r in await session.execute(
                    select(graph_items.c.text).where(graph_items.c.kind == "memory")
                )
            ]
        mine = ScopeFilter(tenant=SCOPE.tenant, user_id=SCOPE.user_id, kinds=("memory",))
        query = " ".join(content(n, k) for n, (_, k, _) in enumerate(ops))
        hits = await index.search_sparse(query, mine, 50)
        service = RecallService(
            sessions,
            HybridRetriever(index, minilm(), sessions),
            TierRecall(minilm(), DEFAULT_PARAMS),
            record=_no_visits,
        )
        answer = await service.answer(
            RecallRequest(scope=SCOPE, query=query, limit=50, include_pages=False),
            T0 + timedelta(days=1),
        )
        recalled = [m.content for m in answer.memories] + [i.text for i in answer.items]

        assert sorted(live.values()) == sorted(rows)
        assert len(live) == await index.count(mine)
        assert sorted(f"{k}: {v}" for k, v in live.items()) == sorted(h.text for h in hits)
        assert sorted(f"{k}: {v}" for k, v in live.items()) == sorted(graph)
        for text in gone - set(live.values()):
            assert all(text not in found for found in recalled)
            assert text not in answer.context
    finally:
        await index.close()
        await engine.dispose()
        await cache.dispose()


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=operations)
def test_forgotten_memories_are_gone_from_every_read_model_index_and_recall(
    ops: list[tuple[str, str, uuid.UUID | None]],
) -> None:
    """Whatever ids clients send, a key is one memory; once forgotten it is nowhere."""
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(scenario(ops, Path(folder)))


async def _no_visits(event: object) -> None:
    """Fail: no segment exists in this test, so recall has no visit to record."""
    raise AssertionError(f"unexpected visit {event!r}")
