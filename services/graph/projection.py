"""The graph projection: items, entities, mentions and bi-temporal edges in SQL.

Live, a turn or memory triggers one extraction, published as ``GraphExtracted``; the graph
itself is folded only from the ``GraphExtracted`` copies the log holds, live and in replay
alike. So a redelivered trigger whose second extraction differs (an LLM) cannot diverge: the
stream keeps the first copy (same id) and only that copy is ever folded.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import delete, select, update
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
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
    derived_id,
)
from memoryd.shared.contracts.retrieval import GraphExtracted, MemoryExpired
from memoryd.shared.domain.graph import SINGLE_VALUED, name_key, node_id
from memoryd.shared.domain.items import forget_ids, memory_text, point_id, turn_text
from memoryd.shared.domain.memories import memory_identity


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
        row = item_row(event)
        await _forget_items(session, [row["item_id"]], keep_item=True)  # type: ignore[list-item]
        await upsert(session, graph_items, [row], ["item_id"])

    async def _remove(self, session: AsyncSession, event: AnyEvent) -> None:
        scope = event.scope
        if isinstance(event, MemoryForgotten):
            await _forget_items(session, list(forget_ids(event)))
        elif isinstance(event, MemoryExpired):
            await _forget_items(session, [point_id(event.memory_id, "memory", scope)])
        elif isinstance(event, SessionEnded):
            found = await session.execute(
                select(graph_items.c.item_id).where(
                    (graph_items.c.tenant == scope.tenant)
                    & (graph_items.c.user_id == scope.user_id)
                    & (graph_items.c.session_id == scope.session_id)
                    & (graph_items.c.category == Category.CONVERSATION.value)
                )
            )
            await _forget_items(session, [row.item_id for row in found])

    async def _fold(self, session: AsyncSession, event: GraphExtracted, sequence: int) -> None:
        current = await session.scalar(
            select(graph_items.c.source_event_id).where(graph_items.c.item_id == event.item_id)
        )
        if current != event.cause_event_id:
            return  # the item was forgotten or rewritten since: this extraction is stale
        scope = event.scope
        await _add_nodes(session, event)
        mentions = {name_key(e.name) for e in event.entities}
        mentions |= {name_key(r.target) for r in event.relations}
        await upsert(
            session,
            graph_mentions,
            [
                {
                    "tenant": scope.tenant,
                    "user_id": scope.user_id,
                    "name_key": key,
                    "item_id": event.item_id,
                    "occurred_at": event.valid_at,
                }
                for key in sorted(mentions)
            ],
            ["tenant", "user_id", "name_key", "item_id"],
        )
        for number, relation in enumerate(event.relations):
            await _add_edge(
                session,
                event,
                number,
                relation.source,
                relation.relation,
                relation.target,
                sequence,
            )


async def _add_nodes(session: AsyncSession, event: GraphExtracted) -> None:
    scope = event.scope
    named = {name_key(e.name): (e.name, e.entity_type) for e in event.entities}
    for relation in event.relations:
        for name in (relation.source, relation.target):
            named.setdefault(name_key(name), (name, "thing"))
    existing = await session.execute(
        select(graph_nodes.c.name_key).where(
            (graph_nodes.c.tenant == scope.tenant)
            & (graph_nodes.c.user_id == scope.user_id)
            & graph_nodes.c.name_key.in_(list(named))
        )
    )
    known = {row.name_key for row in existing}
    rows = [
        {
            "node_id": node_id(scope.tenant, scope.user_id, key),
            "tenant": scope.tenant,
            "user_id": scope.user_id,
            "name_key": key,
            "name": name,
            "entity_type": entity_type,
            "first_seen_at": event.valid_at,
        }
        for key, (name, entity_type) in sorted(named.items())
        if key not in known
    ]
    if rows:
        await upsert(session, graph_nodes, rows, ["node_id"])


async def _add_edge(
    session: AsyncSession,
    event: GraphExtracted,
    number: int,
    source: str,
    relation: str,
    target: str,
    sequence: int,
) -> None:
    scope = event.scope
    source_key, target_key = name_key(source), name_key(target)
    same = (
        (graph_edges.c.tenant == scope.tenant)
        & (graph_edges.c.user_id == scope.user_id)
        & (graph_edges.c.source_key == source_key)
        & (graph_edges.c.relation == relation)
    )
    invalid_at = None
    if relation in SINGLE_VALUED:
        # A newer fact contradicts the older: the old edge ends when the new one starts; it is
        # kept (invalidated, not deleted), so history stays queryable.
        await session.execute(
            update(graph_edges)
            .where(
                same,
                graph_edges.c.target_key != target_key,
                graph_edges.c.invalid_at.is_(None),
                graph_edges.c.valid_at <= event.valid_at,
            )
            .values(invalid_at=event.valid_at)
        )
        invalid_at = await session.scalar(
            select(graph_edges.c.valid_at)
            .where(
                same,
                graph_edges.c.target_key != target_key,
                graph_edges.c.valid_at > event.valid_at,
            )
            .order_by(graph_edges.c.valid_at)
            .limit(1)
        )
    await upsert(
        session,
        graph_edges,
        [
            {
                "edge_id": derived_id(event.event_id, f"edge.{number}"),
                "tenant": scope.tenant,
                "user_id": scope.user_id,
                "source_key": source_key,
                "relation": relation,
                "target_key": target_key,
                "item_id": event.item_id,
                "valid_at": event.valid_at,
                "invalid_at": invalid_at,
                "stream_seq": sequence,
            }
        ],
        ["edge_id"],
    )


async def _forget_items(
    session: AsyncSession, item_ids: Sequence[uuid.UUID], keep_item: bool = False
) -> None:
    """Remove items' mentions and edges (a forgotten fact leaves the graph entirely)."""
    if not item_ids:
        return
    await session.execute(delete(graph_mentions).where(graph_mentions.c.item_id.in_(item_ids)))
    await session.execute(delete(graph_edges).where(graph_edges.c.item_id.in_(item_ids)))
    if not keep_item:
        await session.execute(delete(graph_items).where(graph_items.c.item_id.in_(item_ids)))
