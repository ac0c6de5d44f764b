"""The graph read model's store: the queries other components ask of the knowledge graph.

The tables (``graph_nodes``, ``graph_edges``, ``graph_mentions``, ``graph_items``) are written
by the graph projection alone; recall reads them through here. What a query means (matching,
the walk, scoring) is pure and lives in ``shared.domain.graph``.
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Table, false, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.index.sparse import terms
from memoryd.shared.adapters.llm.offline import USER_ENTITY
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions
from memoryd.shared.domain.graph import Edge, hubs, matched_entities, walk


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
    scores: dict[uuid.UUID, float] = defaultdict(float)
    named = [key for key in start - {USER_ENTITY} - hubs(total, counts)]
    mentioned = await session.execute(
        select(graph_mentions.c.item_id, graph_mentions.c.name_key).where(
            _owner(graph_mentions, scope), graph_mentions.c.name_key.in_(named)
        )
    )
    for row in mentioned:
        scores[row.item_id] += math.log(1 + total / max(1, counts.get(row.name_key, 1)))
    edges = await session.execute(
        select(graph_edges).where(_owner(graph_edges, scope), graph_edges.c.invalid_at.is_(None))
    )
    found = [Edge(e.source_key, e.relation, e.target_key, e.item_id) for e in edges]
    for item_id, score in walk(start, found, set(terms(query))).items():
        scores[item_id] += score
    if not scores:
        return []
    best = sorted(scores, key=lambda item_id: (-scores[item_id], str(item_id)))[: limit * 4]
    rows = await session.execute(
        select(graph_items).where(item_filter(scope), graph_items.c.item_id.in_(best))
    )
    hits = [GraphHit(row.item_id, scores[row.item_id], dict(row._mapping)) for row in rows]
    hits.sort(key=lambda hit: (-hit.score, str(hit.item_id)))
    return hits[:limit]
