"""The graph projection: items, entities, mentions and bi-temporal edges in SQL.

Live, a turn or memory triggers one extraction, published as ``GraphExtracted``; the graph
itself is folded only from the ``GraphExtracted`` copies the log holds, live and in replay
alike. So a redelivered trigger whose second extraction differs (an LLM) cannot diverge: the
stream keeps the first copy (same id) and only that copy is ever folded.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.graph.extraction import (
    GraphSource,
    extract,
    item_of,
    recorded,
    step_failures,
)
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.llm import MemoryLlm
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions, graph_nodes
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.retrieval import GraphExtracted, MemoryExpired
from memoryd.shared.domain.graph import add_edges, asserted_edges, mentioned, named_entities
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
    """Extract the graph of each turn and memory (live) and fold the recorded extractions."""

    consumer = subjects.GRAPH_CONSUMER
    tables = (graph_nodes, graph_edges, graph_mentions, graph_items)

    def __init__(self, llm: MemoryLlm) -> None:
        self._llm = llm

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Fold the batch in order; live, return one extraction per new turn or memory."""
        effects = Effects()
        for item in batch:
            event = item.event
            if isinstance(event, TurnRecorded | MemoryRemembered):
                await self._store_item(session, event)
                if live:
                    # A failed LLM step falls back to the offline rules and is recorded.
                    extraction = await extract(self._llm, event)
                    effects.derived += step_failures(event, extraction)
                    effects.derived.append(recorded(event, extraction.found))
            elif isinstance(event, GraphExtracted):
                await self._fold(session, event, item.sequence)
            else:
                await self._remove(session, event)
        return effects

    async def _store_item(self, session: AsyncSession, event: GraphSource) -> None:
        await store.store_item(session, item_row(event))

    async def _remove(self, session: AsyncSession, event: AnyEvent) -> None:
        if isinstance(event, MemoryForgotten):
            await store.forget_items(session, list(forget_ids(event)))
        elif isinstance(event, MemoryExpired):
            await store.forget_items(session, [point_id(event.memory_id, "memory", event.scope)])
        elif isinstance(event, SessionEnded):
            await store.forget_items(session, await store.conversation_items(session, event.scope))

    async def _fold(self, session: AsyncSession, event: GraphExtracted, sequence: int) -> None:
        if await store.item_source(session, event.item_id) != event.cause_event_id:
            return  # the item was forgotten or rewritten since: this extraction is stale
        scope = event.scope
        await store.add_nodes(session, scope, named_entities(event), event.valid_at)
        await store.add_mentions(session, scope, event.item_id, mentioned(event), event.valid_at)
        facts = asserted_edges(event)
        current = await store.edges_of(session, scope, {(e.source, e.relation) for e in facts})
        await store.write_edges(session, scope, event.item_id, add_edges(current, facts), sequence)
