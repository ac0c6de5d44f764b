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
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.graph.extraction import GraphSource, decide, item_of
from memoryd.services.runtime.decisions import DecisionLog
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.llm import MemoryLlm
from memoryd.shared.adapters.sql import ledger
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions, graph_nodes
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
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
from memoryd.shared.stores import graph as store


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
    tables = (graph_nodes, graph_edges, graph_mentions, graph_items)

    def __init__(self, llm: MemoryLlm, decisions: DecisionLog) -> None:
        self._llm = llm
        self._decisions = decisions

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply the batch in order; live, extract and fold each new item's graph at once."""
        stored_at: dict[uuid.UUID, int] = {}  # this batch's items: trigger -> stream sequence
        for item in batch:
            event = item.event
            if isinstance(event, TurnRecorded | MemoryRemembered):
                await store.store_item(session, item_row(event))
                stored_at[event.event_id] = item.sequence
                if live:
                    extracted = await decide(self._llm, self._decisions, event)
                    await _fold(session, extracted, item.sequence)
            elif isinstance(event, GraphExtracted):
                if not live:
                    sequence = stored_at.get(event.cause_event_id)
                    await _fold(session, event, sequence or await self._stored_at(session, event))
            else:
                await self._remove(session, event)
        return Effects()

    async def _stored_at(self, session: AsyncSession, event: GraphExtracted) -> int:
        # An edge records the stream sequence of the turn or memory that asserted it, as the
        # live fold does; the ledger knows where an earlier batch applied the trigger.
        seen = await ledger.first_seen(session, self.consumer, [event.cause_event_id])
        first = seen.get(event.cause_event_id)
        return first.sequence if first is not None else 0

    async def _remove(self, session: AsyncSession, event: AnyEvent) -> None:
        if isinstance(event, MemoryForgotten):
            await store.forget_items(session, list(forget_ids(event)))
        elif isinstance(event, MemoryExpired):
            await store.forget_items(session, [point_id(event.memory_id, "memory", event.scope)])
        elif isinstance(event, SessionEnded):
            await store.forget_items(session, await store.conversation_items(session, event.scope))


async def _fold(session: AsyncSession, event: GraphExtracted, sequence: int) -> None:
    """Fold an extraction; a stale one (its item changed since) adds no edges or mentions."""
    scope = event.scope
    current = await store.item_source(session, event.item_id) == event.cause_event_id
    await store.add_nodes(session, scope, named_entities(event), event.valid_at)
    if current:
        await store.add_mentions(session, scope, event.item_id, mentioned(event), event.valid_at)
    facts = asserted_edges(event)
    known = await store.edges_of(session, scope, {(e.source, e.relation) for e in facts})
    change = add_edges(known, facts)
    if not current:
        change = EdgeChange(invalidate=change.invalidate)
    await store.write_edges(session, scope, event.item_id, change, sequence)
