"""The indexer projection: embed retrievable items and keep the search index in step.

Qdrant is not transactional with SQL. Every index write is idempotent (deterministic point
ids: an upsert replaces, a delete of a missing point is a no-op), so the runner's order
(apply to the index, then commit the tracking row) is safe: a redelivered batch writes the
same points again. Embeddings go through a ``CachedEmbedder`` over the SQL embedding cache,
so replay (``live=False``) rebuilds the index from the cache without running the model: the
vectors are the ones the live pass stored, so replay cannot diverge.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.indexer.items import (
    Delete,
    DeleteWhere,
    KeyOptions,
    Operation,
    Upsert,
    conversation_key,
    plan,
)
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.index import DenseVector, IndexPoint, SearchIndex
from memoryd.shared.adapters.sql.tables import index_last_turns, memory_expirations
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.retrieval import MemoryExpired

log = structlog.get_logger(__name__)


def runs(operations: Sequence[Operation]) -> list[list[Operation]]:
    """Group consecutive upserts, so each run is one index call; deletes stay single."""
    grouped: list[list[Operation]] = []
    for op in operations:
        if isinstance(op, Upsert) and grouped and isinstance(grouped[-1][0], Upsert):
            grouped[-1].append(op)
        else:
            grouped.append([op])
    return grouped


async def _record_expiries(session: AsyncSession, batch: Sequence[Positioned]) -> None:
    rows = [
        {
            "memory_id": item.event.memory_id,
            "source_event_id": item.event.source_event_id,
            "tenant": item.event.scope.tenant,
            "expired_at": item.event.occurred_at,
        }
        for item in batch
        if isinstance(item.event, MemoryExpired)
    ]
    await upsert(session, memory_expirations, rows, ["memory_id", "source_event_id"])


async def _last_turns(session: AsyncSession, events: Sequence[object]) -> dict[uuid.UUID, str]:
    """Load the last indexed turn of each conversation the batch continues."""
    wanted = {conversation_key(e.scope) for e in events if isinstance(e, TurnRecorded)}
    if not wanted:
        return {}
    found = await session.execute(
        select(index_last_turns.c.conversation_id, index_last_turns.c.text).where(
            index_last_turns.c.conversation_id.in_(list(wanted))
        )
    )
    return {row.conversation_id: row.text for row in found}


async def _store_last_turns(
    session: AsyncSession,
    events: Sequence[object],
    before: dict[uuid.UUID, str],
    after: dict[uuid.UUID, str],
) -> None:
    tenants = {
        conversation_key(e.scope): e.scope.tenant for e in events if isinstance(e, TurnRecorded)
    }
    rows = [
        {"conversation_id": key, "tenant": tenants[key], "text": text}
        for key, text in after.items()
        if before.get(key) != text
    ]
    await upsert(session, index_last_turns, rows, ["conversation_id"])


class IndexerProjection:
    """Upsert turns and explicit memories into the index; delete what is forgotten."""

    consumer = subjects.INDEXER_CONSUMER
    folds: frozenset[type[Event]] = frozenset(
        {TurnRecorded, MemoryRemembered, MemoryForgotten, MemoryExpired, SessionEnded}
    )
    tables = (memory_expirations, index_last_turns)

    def __init__(
        self, index: SearchIndex, embedder: Embedder, keys: KeyOptions | None = None
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._keys = keys or KeyOptions()

    async def warm(self, events: Sequence[AnyEvent]) -> None:
        """Embed the batch's new texts into the cache before the transaction."""
        # Windows that join a turn of an earlier batch are planned in the transaction, once
        # the stored last turns are read: only those few texts are embedded there.
        draft, _ = plan(events, None, self._keys)
        await self._embed([op for op in draft if isinstance(op, Upsert)])

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply the batch's index operations in log order, then its bookkeeping rows."""
        events = [item.event for item in batch]
        before = await _last_turns(session, events)
        operations, after = plan(events, before, self._keys)
        upserts = [op for op in operations if isinstance(op, Upsert)]
        # ``warm`` embedded all but the windows joining an earlier batch's turn before the
        # transaction: those come from the cache, these few are embedded here.
        dense = await self._embed(upserts)
        for run in runs(operations):
            await self._write(run, dense)
        await _record_expiries(session, batch)
        await _store_last_turns(session, events, before, after)
        if upserts:
            log.debug("indexed", points=len(upserts), live=live)
        return Effects()

    async def _embed(self, upserts: Sequence[Upsert]) -> dict[uuid.UUID, DenseVector]:
        # One embedding call per batch: the model is far faster on hundreds of texts at once.
        if not upserts:
            return {}
        vectors = await self._embedder.embed([op.text for op in upserts])
        return dict(zip((op.id for op in upserts), vectors, strict=True))

    async def _write(self, run: Sequence[Operation], dense: dict[uuid.UUID, DenseVector]) -> None:
        head = run[0]
        if isinstance(head, Upsert):
            # Built from checked parts (the plan's ids and payloads, the model's vectors):
            # validating each point again cost ~30 us a point when a replay rebuilds the index.
            points = [
                IndexPoint.model_construct(
                    id=op.id, dense=dense[op.id], text=op.text, payload=op.payload
                )
                for op in run
                if isinstance(op, Upsert)
            ]
            await self._index.upsert(points)
        elif isinstance(head, Delete):
            await self._index.delete(head.ids)
        elif isinstance(head, DeleteWhere):
            await self._index.delete_where(head.filter)
