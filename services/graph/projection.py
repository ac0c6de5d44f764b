"""The graph projection: items, entities, mentions and bi-temporal edges in SQL.

Live, each turn or memory is stored as an item, and its extraction is decided, recorded as
``GraphExtracted`` through the decision log and folded in the same transaction (the copy the
log keeps: a redelivered trigger that extracts differently folds the first answer). The
worker skips its own ``GraphExtracted`` when it comes back; replay folds it and decides
nothing, as the MemoryOS tiers do.

Replay folds an extraction where the log holds it, after the events that followed its
trigger; live folded it at the trigger. When the item was rewritten or forgotten in between,
live dropped the item's edges and mentions again but kept what the fold did to the rest of
the graph (new nodes, older edges it ended): replay keeps exactly that, and adds no edges or
mentions for the stale item.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.graph.extraction import GraphSource, decide, item_of
from memoryd.services.runtime.decisions import DecisionLog
from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.services.runtime.sharing import interleaved
from memoryd.shared import subjects
from memoryd.shared.adapters.llm import MemoryLlm
from memoryd.shared.adapters.sql import ledger
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions, graph_nodes
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
    UserErased,
)
from memoryd.shared.contracts.retrieval import GraphExtracted, MemoryExpired
from memoryd.shared.domain.graph import (
    EdgeChange,
    add_edges,
    asserted_edges,
    mentioned,
    named_entities,
)
from memoryd.shared.domain.items import forget_ids, memory_text, point_id, turn_text
from memoryd.shared.domain.memories import memory_identity
from memoryd.shared.stores.graph import GraphWork


def item_row(event: GraphSource) -> dict[str, object]:
    """Return the graph_items row of a turn or memory."""
    scope = event.scope
    kind, item_id = item_of(event)
    row: dict[str, object] = {
        "item_id": item_id,
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
        "session_id": scope.session_id,
        "namespace": scope.namespace,
        "kind": kind,
        "category": None,
        "memory_id": None,
        "source_event_id": event.event_id,
        "occurred_at": event.occurred_at,
    }
    if isinstance(event, MemoryRemembered):
        return row | {
            "category": event.category.value,
            "memory_id": memory_identity(event),
            "text": memory_text(event),
        }
    return row | {"text": turn_text(event)}


class GraphProjection:
    """Store each turn and memory as an item; decide its graph (live) or fold it (replay)."""

    consumer = subjects.GRAPH_CONSUMER
    folds: frozenset[type[Event]] = frozenset(
        {
            TurnRecorded,
            MemoryRemembered,
            GraphExtracted,
            MemoryForgotten,
            MemoryExpired,
            SessionEnded,
            UserErased,
        }
    )
    decides: frozenset[type[Event]] = frozenset({GraphExtracted})
    tables = (graph_nodes, graph_edges, graph_mentions, graph_items)

    def __init__(self, llm: MemoryLlm, decisions: DecisionLog) -> None:
        self._llm = llm
        self._decisions = decisions

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases (nodes, edges, mentions, items), then fold."""
        return await fold_with_erasures(
            session, batch, live, self._fold_batch, erase_rows(self.tables)
        )

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply the batch in order; live, extract and fold each new item's graph at once.

        Live, every new item's extraction is decided first (a decision reads no graph),
        then the batch is folded in order through one ``GraphWork``, written at the end.
        """
        extracted = await self._decide(batch) if live else _recorded(batch)
        work = GraphWork(session)
        await _prefetch(work, extracted.values())
        triggers = {} if live else await self._triggers(session, batch)
        async for item in interleaved(batch):
            event = item.event
            if isinstance(event, TurnRecorded | MemoryRemembered):
                work.store_item(item_row(event))
                triggers[event.event_id] = item.sequence
                if live:
                    await _fold(work, extracted[event.event_id], item.sequence)
            elif isinstance(event, GraphExtracted):
                if not live:
                    await _fold(work, event, triggers.get(event.cause_event_id, 0))
            else:
                await _remove(work, event)
        await work.flush()
        return Effects()

    async def _decide(self, batch: Sequence[Positioned]) -> dict[uuid.UUID, GraphExtracted]:
        """Decide (and record) the extraction of every turn and memory, in log order."""
        return {
            item.event.event_id: await decide(self._llm, self._decisions, item.event)
            async for item in interleaved(batch)
            if isinstance(item.event, TurnRecorded | MemoryRemembered)
        }

    async def _triggers(
        self, session: AsyncSession, batch: Sequence[Positioned]
    ) -> dict[uuid.UUID, int]:
        # An edge records the stream sequence of the turn or memory that asserted it, as the
        # live fold does; the ledger knows where an earlier batch applied a trigger.
        causes = [i.event.cause_event_id for i in batch if isinstance(i.event, GraphExtracted)]
        seen = await ledger.first_seen(session, self.consumer, causes) if causes else {}
        return {event_id: first.sequence for event_id, first in seen.items()}


def _recorded(batch: Sequence[Positioned]) -> dict[uuid.UUID, GraphExtracted]:
    """Return the extractions the log holds in this batch (what replay folds)."""
    return {i.event.event_id: i.event for i in batch if isinstance(i.event, GraphExtracted)}


async def _prefetch(work: GraphWork, extractions: Iterable[GraphExtracted]) -> None:
    """Read at once the items, nodes and edge pairs these extractions will touch."""
    items, nodes, pairs = [], [], []
    for event in extractions:
        owner = (event.scope.tenant, event.scope.user_id)
        items.append(event.item_id)
        nodes += [(*owner, key) for key in named_entities(event)]
        pairs += [(*owner, edge.source, edge.relation) for edge in asserted_edges(event)]
    await work.prefetch(items, nodes, pairs)


async def _remove(work: GraphWork, event: AnyEvent) -> None:
    if isinstance(event, MemoryForgotten):
        work.forget_items(forget_ids(event))
    elif isinstance(event, MemoryExpired):
        work.forget_items([point_id(event.memory_id, "memory", event.scope)])
    elif isinstance(event, SessionEnded):
        work.forget_items(await work.conversation_items(event.scope))


async def _fold(work: GraphWork, event: GraphExtracted, sequence: int) -> None:
    """Fold an extraction; a stale one (its item changed since) adds no edges or mentions."""
    scope = event.scope
    current = await work.item_source(event.item_id) == event.cause_event_id
    await work.add_nodes(scope, named_entities(event), event.valid_at)
    if current:
        work.add_mentions(scope, event.item_id, mentioned(event), event.valid_at)
    facts = asserted_edges(event)
    known = await work.edges_of(scope, {(e.source, e.relation) for e in facts})
    change = add_edges(known, facts)
    if not current:
        change = EdgeChange(invalidate=change.invalidate)
    work.write_edges(scope, event.item_id, change, sequence)
