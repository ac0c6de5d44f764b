"""The graph read model's store: its tables' writes and the queries others ask of it.

The tables (``graph_nodes``, ``graph_edges``, ``graph_mentions``, ``graph_items``) are written
by the graph projection alone, through the writes here; recall reads them through the queries.
What a change or a query means (the bi-temporal rule, matching, the walk, scoring) is pure and
lives in ``shared.domain.graph``: this module only moves rows.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Table, delete, false, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.llm.offline import USER_ENTITY
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions, graph_nodes
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.events import Category
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.graph import (
    Edge,
    EdgeChange,
    TimedEdge,
    graph_scores,
    hubs,
    matched_entities,
    node_id,
    walk,
)
from memoryd.shared.domain.text import terms


@dataclass(frozen=True, slots=True)
class GraphHit:
    """An item the graph reached, with its score and what recall shows of it."""

    item_id: uuid.UUID
    score: float
    row: Mapping[str, object]


def _owner(table: Table, scope: ScopeFilter) -> ColumnElement[bool]:
    columns = table.c
    condition: ColumnElement[bool] = columns.tenant == scope.tenant
    if scope.user_id is not None:
        condition = condition & (columns.user_id == scope.user_id)
    return condition


def item_filter(scope: ScopeFilter) -> ColumnElement[bool]:
    """Return the SQL condition for graph items inside ``scope`` (same meaning as the index)."""
    c = graph_items.c
    condition = _owner(graph_items, scope)
    for field in ("agent_id", "session_id", "namespace"):
        value = getattr(scope, field)
        if value is not None:
            condition = condition & (c[field] == value)
    if scope.kinds is not None:
        condition = condition & c.kind.in_(scope.kinds)
    if scope.categories is not None:
        condition = condition & c.category.in_(scope.categories)
    if scope.memory_types is not None:
        condition = condition & false()  # graph items carry no memory type: none can match
    if scope.occurred_after is not None:
        condition = condition & (c.occurred_at >= _when(scope.occurred_after))
    if scope.occurred_before is not None:
        condition = condition & (c.occurred_at < _when(scope.occurred_before))
    return condition


def _when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


async def mention_counts(session: AsyncSession, scope: ScopeFilter) -> tuple[int, dict[str, int]]:
    """Return how many items the scope's graph holds, and how many mention each entity."""
    total = await session.scalar(select(func.count()).where(_owner(graph_items, scope)))
    rows = await session.execute(
        select(graph_mentions.c.name_key, func.count())
        .where(_owner(graph_mentions, scope))
        .group_by(graph_mentions.c.name_key)
    )
    return int(total or 0), {row[0]: int(row[1]) for row in rows}


async def graph_search(
    session: AsyncSession,
    query: str,
    scope: ScopeFilter,
    limit: int,
    mentions: tuple[int, dict[str, int]] | None = None,
) -> list[GraphHit]:
    """Return the items the query's entities lead to, best first.

    A mention counts ``ln(1 + items / mentions)`` (rare entities say more); hubs count 0.
    ``mentions`` is ``mention_counts`` of the scope when the caller has it already.
    """
    total, counts = mentions if mentions is not None else await mention_counts(session, scope)
    start = matched_entities(query, counts.keys() | {USER_ENTITY})
    if not start:
        return []
    named = [key for key in start - {USER_ENTITY} - hubs(total, counts)]
    found = await _mentions_of(session, scope, named)
    reached = walk(start, await _valid_edges(session, scope), set(terms(query)))
    scores = graph_scores(found, reached, total, counts)
    if not scores:
        return []
    return await _best_hits(session, scope, scores, limit)


async def _mentions_of(
    session: AsyncSession, scope: ScopeFilter, keys: list[str]
) -> list[tuple[uuid.UUID, str]]:
    """Return the (item, entity) pairs of the scope's items that mention these entities."""
    rows = await session.execute(
        select(graph_mentions.c.item_id, graph_mentions.c.name_key).where(
            _owner(graph_mentions, scope), graph_mentions.c.name_key.in_(keys)
        )
    )
    return [(row.item_id, row.name_key) for row in rows]


async def _valid_edges(session: AsyncSession, scope: ScopeFilter) -> list[Edge]:
    """Return the scope's edges that no later fact has invalidated."""
    rows = await session.execute(
        select(graph_edges).where(_owner(graph_edges, scope), graph_edges.c.invalid_at.is_(None))
    )
    return [Edge(e.source_key, e.relation, e.target_key, e.item_id) for e in rows]


async def _best_hits(
    session: AsyncSession, scope: ScopeFilter, scores: Mapping[uuid.UUID, float], limit: int
) -> list[GraphHit]:
    """Read the best-scored items inside ``scope``; return at most ``limit``, best first."""
    best = sorted(scores, key=lambda item_id: (-scores[item_id], str(item_id)))[: limit * 4]
    rows = await session.execute(
        select(graph_items).where(item_filter(scope), graph_items.c.item_id.in_(best))
    )
    hits = [GraphHit(row.item_id, scores[row.item_id], dict(row._mapping)) for row in rows]
    hits.sort(key=lambda hit: (-hit.score, str(hit.item_id)))
    return hits[:limit]


# --- writes (the graph projection's) ------------------------------------------------------


async def item_source(session: AsyncSession, item_id: uuid.UUID) -> uuid.UUID | None:
    """Return the event an item's current text came from (None: no such item)."""
    source: uuid.UUID | None = await session.scalar(
        select(graph_items.c.source_event_id).where(graph_items.c.item_id == item_id)
    )
    return source


async def store_item(session: AsyncSession, row: Mapping[str, object]) -> None:
    """Store an item's row, dropping what an older text of it said (mentions, edges)."""
    item_id: uuid.UUID = row["item_id"]  # type: ignore[assignment]
    await forget_items(session, [item_id], keep_item=True)
    await upsert(session, graph_items, [dict(row)], ["item_id"])


async def forget_items(
    session: AsyncSession, item_ids: Sequence[uuid.UUID], keep_item: bool = False
) -> None:
    """Remove items' mentions and edges (a forgotten fact leaves the graph entirely)."""
    if not item_ids:
        return
    await session.execute(delete(graph_mentions).where(graph_mentions.c.item_id.in_(item_ids)))
    await session.execute(delete(graph_edges).where(graph_edges.c.item_id.in_(item_ids)))
    if not keep_item:
        await session.execute(delete(graph_items).where(graph_items.c.item_id.in_(item_ids)))


async def conversation_items(session: AsyncSession, scope: Scope) -> list[uuid.UUID]:
    """Return the conversation memories of a session (what its end clears)."""
    found = await session.execute(
        select(graph_items.c.item_id).where(
            (graph_items.c.tenant == scope.tenant)
            & (graph_items.c.user_id == scope.user_id)
            & (graph_items.c.session_id == scope.session_id)
            & (graph_items.c.category == Category.CONVERSATION.value)
        )
    )
    return [row.item_id for row in found]


async def add_nodes(
    session: AsyncSession,
    scope: Scope,
    named: Mapping[str, tuple[str, str]],
    first_seen_at: datetime,
) -> None:
    """Add a node for each named entity (key -> name, type) the user's graph lacks."""
    known = await _known_nodes(session, scope, list(named))
    rows = [
        {
            "node_id": node_id(scope.tenant, scope.user_id, key),
            "tenant": scope.tenant,
            "user_id": scope.user_id,
            "name_key": key,
            "name": name,
            "entity_type": entity_type,
            "first_seen_at": first_seen_at,
        }
        for key, (name, entity_type) in sorted(named.items())
        if key not in known
    ]
    if rows:
        await upsert(session, graph_nodes, rows, ["node_id"])


async def _known_nodes(session: AsyncSession, scope: Scope, keys: list[str]) -> set[str]:
    """Return which of these entities the user's graph has a node for."""
    existing = await session.execute(
        select(graph_nodes.c.name_key).where(
            (graph_nodes.c.tenant == scope.tenant)
            & (graph_nodes.c.user_id == scope.user_id)
            & graph_nodes.c.name_key.in_(keys)
        )
    )
    return {row.name_key for row in existing}


async def add_mentions(
    session: AsyncSession,
    scope: Scope,
    item_id: uuid.UUID,
    keys: Iterable[str],
    occurred_at: datetime,
) -> None:
    """Record that an item mentions these entities."""
    rows = [
        {
            "tenant": scope.tenant,
            "user_id": scope.user_id,
            "name_key": key,
            "item_id": item_id,
            "occurred_at": occurred_at,
        }
        for key in sorted(keys)
    ]
    await upsert(session, graph_mentions, rows, ["tenant", "user_id", "name_key", "item_id"])


def _utc(at: datetime) -> datetime:
    # SQLite hands datetimes back naive (and stores them without an offset): edge times are
    # written in UTC, so a naive one read back is UTC and compares right with an aware one.
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _utc_or_none(at: datetime | None) -> datetime | None:
    return None if at is None else _utc(at)


async def edges_of(
    session: AsyncSession, scope: Scope, pairs: Iterable[tuple[str, str]]
) -> list[TimedEdge]:
    """Return the user's edges, valid or not, of these (source, relation) pairs."""
    wanted = set(pairs)
    if not wanted:
        return []
    c = graph_edges.c
    rows = await session.execute(
        select(c.edge_id, c.source_key, c.relation, c.target_key, c.valid_at, c.invalid_at).where(
            (c.tenant == scope.tenant)
            & (c.user_id == scope.user_id)
            & c.source_key.in_({source for source, _ in wanted})
            & c.relation.in_({relation for _, relation in wanted})
        )
    )
    edges = [
        TimedEdge(
            row.edge_id,
            row.source_key,
            row.relation,
            row.target_key,
            _utc(row.valid_at),
            _utc_or_none(row.invalid_at),
        )
        for row in rows
    ]
    return [edge for edge in edges if (edge.source, edge.relation) in wanted]


async def write_edges(
    session: AsyncSession,
    scope: Scope,
    item_id: uuid.UUID,
    change: EdgeChange,
    sequence: int,
) -> None:
    """Persist an ``EdgeChange``: end the older edges, insert the item's new ones."""
    await _end_edges(session, change.invalidate)
    rows = [_edge_row(scope, item_id, edge, sequence) for edge in change.insert]
    if rows:
        await upsert(session, graph_edges, rows, ["edge_id"])


async def _end_edges(session: AsyncSession, invalidate: Mapping[uuid.UUID, datetime]) -> None:
    """Set each edge's ``invalid_at`` (one update per distinct time)."""
    by_time: dict[datetime, list[uuid.UUID]] = defaultdict(list)
    for edge_id, at in invalidate.items():
        by_time[_utc(at)].append(edge_id)
    for at, edge_ids in sorted(by_time.items()):
        await session.execute(
            update(graph_edges).where(graph_edges.c.edge_id.in_(edge_ids)).values(invalid_at=at)
        )


def _edge_row(
    scope: Scope, item_id: uuid.UUID, edge: TimedEdge, sequence: int
) -> dict[str, object]:
    return {
        "edge_id": edge.edge_id,
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "source_key": edge.source,
        "relation": edge.relation,
        "target_key": edge.target,
        "item_id": item_id,
        "valid_at": _utc(edge.valid_at),
        "invalid_at": _utc_or_none(edge.invalid_at),
        "stream_seq": sequence,
    }
