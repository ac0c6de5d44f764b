"""The indexer projection: embed retrievable items and keep the search index in step.

Qdrant is not transactional with SQL. Every index write is idempotent (deterministic point
ids: an upsert replaces, a delete of a missing point is a no-op), so the runner's order
(apply to the index, then commit the tracking row) is safe: a redelivered batch writes the
same points again. Embeddings go through a ``CachedEmbedder`` over the SQL embedding cache,
so replay (``live=False``) rebuilds the index from the cache without running the model: the
vectors are the ones the live pass stored, so replay cannot diverge. Replay writes only the
points that differ from what the index holds (``SearchIndex.upsert_changed``, by a digest of
everything a point stores): onto the index the live pass built, it writes back what was lost
and rewrites what another model or BM25 encoding would store differently, nothing else.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.indexer.items import (
    Delete,
    DeleteWhere,
    KeyOptions,
    Operation,
    Upsert,
    composed,
    conversation_key,
    plan,
)
from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.index import DenseVector, IndexPoint, ScopeFilter, SearchIndex
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
    UserErased,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.stores import indexer as store

log = structlog.get_logger(__name__)

# Events a batch plans, embeds and writes at a time: a replay's batch of 5,000 writes its
# first chunk to the index (the host's work, ~0.2 s of a 5,700-event replay) while it plans the
# next. Live batches are smaller: one chunk.
WRITE_CHUNK = 256

# Conversations whose last turn ``warm`` remembers (a hint: the transaction reads the stored
# one). With 100 users, each a few conversations, every window of the next batch is warmed.
LAST_TURNS_HINTED = 10_000


def runs(operations: Sequence[Operation]) -> list[list[Operation]]:
    """Group consecutive upserts, so each run is one index call; deletes stay single."""
    grouped: list[list[Operation]] = []
    for op in operations:
        if isinstance(op, Upsert) and grouped and isinstance(grouped[-1][0], Upsert):
            grouped[-1].append(op)
        else:
            grouped.append([op])
    return grouped


async def _abandoned(written: asyncio.Task[None] | None) -> None:
    """Cancel the writes still under way (each waits for the one before) and wait for them."""
    if written is not None:
        written.cancel()
        await asyncio.gather(written, return_exceptions=True)


def _owners(events: Sequence[AnyEvent]) -> dict[uuid.UUID, Scope]:
    """Return the conversations the batch's turns continue, with each one's scope."""
    return {conversation_key(e.scope): e.scope for e in events if isinstance(e, TurnRecorded)}


class IndexerProjection:
    """Upsert turns and explicit memories into the index; delete what is forgotten."""

    consumer = subjects.INDEXER_CONSUMER
    folds: frozenset[type[Event]] = frozenset(
        {TurnRecorded, MemoryRemembered, MemoryForgotten, MemoryExpired, SessionEnded, UserErased}
    )
    decides: frozenset[type[Event]] = frozenset()
    tables = store.TABLES

    def __init__(
        self, index: SearchIndex, embedder: Embedder, keys: KeyOptions | None = None
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._keys = keys or KeyOptions()
        # Each conversation's last turn as the last batch planned it: ``warm`` plans the
        # windows that join an earlier batch's turn with it. Without it, those windows (one a
        # batch in one conversation) were embedded inside the transaction, where the call
        # queued behind other projections' model work: 0.7-0.9 s a batch with the write lock
        # held and the model lanes idle after (``bench peers``, 3,000 turns in one scope).
        self._last_turns: dict[uuid.UUID, str] = {}

    async def warm(self, events: Sequence[AnyEvent]) -> None:
        """Embed the batch's new texts into the cache before the transaction."""
        # The last turns are a hint: the transaction plans with the stored ones, and embeds
        # whatever the hint missed (a window after another process's batch, a restart).
        hint = {key: self._last_turns[key] for key in _owners(events) if key in self._last_turns}
        draft, _ = plan(events, hint, self._keys)
        await self._embed([op for op in draft if isinstance(op, Upsert)])

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases, then fold the rest of it (``_fold_batch``)."""
        return await fold_with_erasures(session, batch, live, self._fold_batch, self._erase)

    async def _erase(self, session: AsyncSession, event: UserErased) -> None:
        """Delete the user's index points (every key of every item), then their rows."""
        self._last_turns.clear()  # holds no erased text (erasures are rare: clear them all)
        await self._index.delete_where(
            ScopeFilter(tenant=event.scope.tenant, user_id=event.scope.user_id)
        )
        await erase_rows(self.tables)(session, event)

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply the batch's index operations in log order, then its bookkeeping rows.

        A batch larger than ``WRITE_CHUNK`` events (a replay's) is planned, embedded and
        written a chunk at a time: a chunk's writes go to the index while the next chunk is
        planned, in log order, and all of them are done before the batch's rows are written
        (and so before its commit).
        """
        events = [item.event for item in batch]
        owners = _owners(events)
        before = await store.last_turns(session, list(owners))
        after, points = before, 0
        written: asyncio.Task[None] | None = None
        try:
            for start in range(0, len(events), WRITE_CHUNK):
                operations, after = plan(events[start : start + WRITE_CHUNK], after, self._keys)
                upserts = [op for op in operations if isinstance(op, Upsert)]
                dense = await self._embed(upserts)  # from the cache ``warm`` filled
                written = asyncio.create_task(self._write_after(written, operations, dense, live))
                points += len(upserts)
            if written is not None:
                await written  # the first failure, as it was raised
        except BaseException:
            await _abandoned(written)
            raise
        self._hint_last_turns(after)
        await store.record_expiries(session, [e for e in events if isinstance(e, MemoryExpired)])
        await store.store_last_turns(session, owners, before, after)
        if points:
            log.debug("indexed", points=points, live=live)
        return Effects()

    async def _write_after(
        self,
        previous: asyncio.Task[None] | None,
        operations: Sequence[Operation],
        dense: dict[uuid.UUID, DenseVector],
        live: bool,
    ) -> None:
        """Apply ``operations`` in order once the writes before them are done."""
        if previous is not None:
            await previous
        for run in runs(operations):
            await self._write(run, dense, live)

    def _hint_last_turns(self, after: dict[uuid.UUID, str]) -> None:
        for key, text in after.items():
            self._last_turns.pop(key, None)  # re-inserted last: the oldest go first
            self._last_turns[key] = text
        while len(self._last_turns) > LAST_TURNS_HINTED:
            del self._last_turns[next(iter(self._last_turns))]

    async def _embed(self, upserts: Sequence[Upsert]) -> dict[uuid.UUID, DenseVector]:
        # One embedding call per batch: the model is far faster on hundreds of texts at once.
        if not upserts:
            return {}
        texts = list(dict.fromkeys(text for op in upserts for text in op.texts()))
        vectors = dict(zip(texts, await self._embedder.embed(texts), strict=True))
        return {
            op.id: composed([vectors[p] for p in op.parts], op.parts)
            if op.parts
            else vectors[op.text]
            for op in upserts
        }

    async def _write(
        self, run: Sequence[Operation], dense: dict[uuid.UUID, DenseVector], live: bool
    ) -> None:
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
            if live:
                await self._index.upsert(points)
            else:
                # Replay: the index mostly holds these points already; rewriting each one
                # in place cost ~85 us a point and, past 20,000, an optimisation pass.
                await self._index.upsert_changed(points)
        elif isinstance(head, Delete):
            await self._index.delete(head.ids)
        elif isinstance(head, DeleteWhere):
            await self._index.delete_where(head.filter)
