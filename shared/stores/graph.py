"""The graph read model's store: its tables' writes and the queries others ask of it.

The tables (``graph_nodes``, ``graph_edges``, ``graph_mentions``, ``graph_items``) are written
by the graph projection alone, through the writes here; recall reads them through the queries.
What a change or a query means (the bi-temporal rule, matching, the walk, scoring) is pure and
lives in ``shared.domain.graph``: this module only moves rows.
"""

from __future__ import annotations

import heapq
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Row,
    String,
    Table,
    cast,
    delete,
    false,
    func,
    select,
    true,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.llm.offline import USER_ENTITY
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions, graph_nodes
from memoryd.shared.adapters.sql.times import stored_utc
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.events import Category
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.graph import (
    Edge,
    EdgeChange,
    ScopeGraph,
    TimedEdge,
    graph_scores,
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


def _owned(row: Row[Any], scope: ScopeFilter) -> bool:
    """Say whether a row read by key belongs to the scope's owner (``_owner``, in Python)."""
    return bool(row.tenant == scope.tenant and scope.user_id in (None, row.user_id))


def item_filter(scope: ScopeFilter, *, owner: bool = True) -> ColumnElement[bool]:
    """Return the SQL condition for graph items inside ``scope`` (same meaning as the index).

    ``owner=False`` leaves out tenant and user, for a caller that checks them itself.
    """
    c = graph_items.c
    condition: ColumnElement[bool] = _owner(graph_items, scope) if owner else true()
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


async def scope_graph(session: AsyncSession, scope: ScopeFilter) -> ScopeGraph:
    """Read what every graph search of the scope's owner needs: mentions and valid edges."""
    total, mentions = await scope_mentions(session, scope)
    return ScopeGraph.of(total, mentions, await _valid_edges(session, scope))


async def scope_mentions(
    session: AsyncSession, scope: ScopeFilter
) -> tuple[int, dict[str, tuple[str, ...]]]:
    """Return how many items the scope's graph holds (0 when none mentions an entity), and
    the items that mention each entity (their ids as text: ``ScopeGraph`` makes UUIDs of the
    ones a query reaches).

    Tuples of text, which the garbage collector stops tracking: recall holds this for every
    user it serves (at 1,000 turns a user's graph held 2,512 tracked objects as lists of
    UUIDs, ~1,120 lists and ~1,360 UUIDs, and 36 now; measured over 20 users).
    """
    # The count rides on every mention row (one statement, not two): with no mention there
    # is nothing a count could weigh, and 0 stands for it.
    items = select(func.count()).where(_owner(graph_items, scope)).scalar_subquery()
    rows = await session.execute(
        select(graph_mentions.c.name_key, cast(graph_mentions.c.item_id, String), items)
        .where(_owner(graph_mentions, scope))
        .order_by(graph_mentions.c.name_key, graph_mentions.c.item_id)
    )
    total = 0
    mentions: dict[str, list[str]] = defaultdict(list)
    for key, item_id, items_held in rows:
        mentions[key].append(item_id)
        total = items_held
    return int(total), {key: tuple(item_ids) for key, item_ids in mentions.items()}


# Items of one scope read by key: an item's fields, or None for an item outside the scope.
KnownItems = MutableMapping[uuid.UUID, dict[str, Any] | None]


async def graph_search(
    session: AsyncSession,
    query: str,
    scope: ScopeFilter,
    limit: int,
    graph: ScopeGraph | None = None,
    *,
    known: KnownItems | None = None,
) -> list[GraphHit]:
    """Return the items the query's entities lead to, best first.

    A mention counts ``ln(1 + items / mentions)`` (rare entities say more); hubs count 0.
    ``graph`` is ``scope_graph`` of the scope when the caller holds it already; ``known``
    holds items read before in this scope (see ``KnownItems``), and gains the ones read now.
    """
    graph = graph if graph is not None else await scope_graph(session, scope)
    start = matched_entities(query, graph.names)
    if not start:
        return []
    found = graph.mentioning(sorted(start - {USER_ENTITY} - graph.hubs))
    reached = walk(start, graph.edges, set(terms(query)))
    scores = graph_scores(found, reached, graph.total, graph.counts)
    if not scores:
        return []
    return await _best_hits(session, scope, scores, limit, {} if known is None else known)


async def _valid_edges(session: AsyncSession, scope: ScopeFilter) -> list[Edge]:
    """Return the scope's edges that no later fact has invalidated."""
    rows = await session.execute(
        select(graph_edges).where(_owner(graph_edges, scope), graph_edges.c.invalid_at.is_(None))
    )
    return [Edge(e.source_key, e.relation, e.target_key, e.item_id) for e in rows]


async def _best_hits(
    session: AsyncSession,
    scope: ScopeFilter,
    scores: Mapping[uuid.UUID, float],
    limit: int,
    known: KnownItems,
) -> list[GraphHit]:
    """Read the best-scored items inside ``scope``; return at most ``limit``, best first.

    Only the items ``known`` lacks are read; it gains them, and the ones outside the scope.
    """
    # Ties go by id (a UUID's int orders as its string, without building the string).
    best = heapq.nsmallest(limit * 4, scores, key=lambda item_id: (-scores[item_id], item_id.int))
    missing = [item_id for item_id in best if item_id not in known]
    if missing:
        known.update(await _items_in_scope(session, scope, missing))
    hits = [
        GraphHit(item_id, scores[item_id], fields)
        for item_id in best
        if (fields := known.get(item_id)) is not None
    ]
    hits.sort(key=lambda hit: (-hit.score, hit.item_id.int))
    return hits[:limit]


async def _items_in_scope(
    session: AsyncSession, scope: ScopeFilter, item_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, dict[str, Any] | None]:
    """Return each item's fields if it is inside ``scope``, else None."""
    # Found by primary key, the owner checked here: with tenant and user in the WHERE clause,
    # SQLite walks every item of the user through the (tenant, user, memory) index instead.
    rows = await session.execute(
        select(graph_items).where(
            graph_items.c.item_id.in_(item_ids), item_filter(scope, owner=False)
        )
    )
    found: dict[uuid.UUID, dict[str, Any] | None] = dict.fromkeys(item_ids)
    for row in rows:
        if _owned(row, scope):
            found[row.item_id] = dict(row._mapping)
    return found


async def user_graph(
    session: AsyncSession, tenant: str, user_id: str, limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return a user's entities with their mention counts, most mentioned first, and their
    relations (ended ones too), newest first: at most ``limit`` of each (the memory browser)."""
    owner = ScopeFilter(tenant=tenant, user_id=user_id)
    mentions = (
        select(graph_mentions.c.name_key, func.count().label("mentions"))
        .where(_owner(graph_mentions, owner))
        .group_by(graph_mentions.c.name_key)
        .subquery()
    )
    count = func.coalesce(mentions.c.mentions, 0)
    nodes = await session.execute(
        select(graph_nodes, count.label("mentions"))
        .outerjoin(mentions, mentions.c.name_key == graph_nodes.c.name_key)
        .where(_owner(graph_nodes, owner))
        .order_by(count.desc(), graph_nodes.c.name_key)
        .limit(limit)
    )
    edges = await session.execute(
        select(graph_edges)
        .where(_owner(graph_edges, owner))
        .order_by(graph_edges.c.valid_at.desc(), graph_edges.c.edge_id)
        .limit(limit)
    )
    return [dict(row._mapping) for row in nodes], [dict(row._mapping) for row in edges]


# --- writes (the graph projection's) ------------------------------------------------------

_CHUNK = 400  # keys per IN (...) clause: at most 4 columns each, far below SQLite's limit
_UserKey = tuple[str, str, str]  # (tenant, user_id, key)
_PairKey = tuple[str, str, str, str]  # (tenant, user_id, source_key, relation)


@dataclass(slots=True)
class _OwnedEdge:
    """An edge as the batch holds it: the fact, whose it is, and whether it must be written."""

    tenant: str
    user_id: str
    item_id: uuid.UUID
    edge: TimedEdge
    sequence: int
    dirty: bool


class GraphWork:
    """One batch's unit of work on the graph: reads once, writes every change at ``flush``.

    The projection asks and changes the graph event by event, as if each change were
    written at once; the work reads what it has not seen (all a batch needs, when
    ``prefetch`` is told it first) and keeps the changes in memory. ``flush`` writes them in
    a handful of statements: the deletes first, then the rows that outlived them.
    """

    def __init__(self, session: AsyncSession) -> None:
        self._session = session
        self._sources: dict[uuid.UUID, uuid.UUID | None] = {}  # item -> source event (None: gone)
        self._items: dict[uuid.UUID, dict[str, object]] = {}  # rows stored in this batch
        self._nodes: dict[_UserKey, bool] = {}  # entity -> has a node
        self._new_nodes: dict[_UserKey, dict[str, object]] = {}
        self._mentions: dict[uuid.UUID, dict[_UserKey, dict[str, object]]] = {}  # item -> rows
        self._pairs: set[_PairKey] = set()  # (source, relation) pairs whose edges are held
        self._edges: dict[uuid.UUID, _OwnedEdge] = {}
        self._by_pair: dict[_PairKey, dict[uuid.UUID, None]] = defaultdict(dict)
        self._by_item: dict[uuid.UUID, dict[uuid.UUID, None]] = defaultdict(dict)
        self._cleared: set[uuid.UUID] = set()  # items whose mentions and edges go
        self._dropped: set[uuid.UUID] = set()  # items whose row goes

    # --- reads ---------------------------------------------------------------------------

    async def prefetch(
        self,
        items: Iterable[uuid.UUID],
        nodes: Iterable[_UserKey],
        pairs: Iterable[_PairKey],
    ) -> None:
        """Read at once what the batch will ask about: items' sources, nodes, edge pairs."""
        await self._load_sources(items)
        await self._load_nodes(nodes)
        await self._load_pairs(pairs)

    async def item_source(self, item_id: uuid.UUID) -> uuid.UUID | None:
        """Return the event an item's current text came from (None: no such item)."""
        await self._load_sources([item_id])
        return self._sources[item_id]

    async def conversation_items(self, scope: Scope) -> list[uuid.UUID]:
        """Return the conversation memories of a session (what its end clears)."""
        found = await self._session.execute(
            select(graph_items.c.item_id).where(
                (graph_items.c.tenant == scope.tenant)
                & (graph_items.c.user_id == scope.user_id)
                & (graph_items.c.session_id == scope.session_id)
                & (graph_items.c.category == Category.CONVERSATION.value)
            )
        )
        changed = self._items.keys() | self._dropped  # this batch knows better than the table
        stored = [row.item_id for row in found if row.item_id not in changed]
        batch = [
            item_id
            for item_id, row in self._items.items()
            if _in_session(row, scope) and row["category"] == Category.CONVERSATION.value
        ]
        return stored + batch

    async def edges_of(self, scope: Scope, pairs: Iterable[tuple[str, str]]) -> list[TimedEdge]:
        """Return the user's edges, valid or not, of these (source, relation) pairs."""
        wanted = {(scope.tenant, scope.user_id, source, relation) for source, relation in pairs}
        await self._load_pairs(wanted)
        return [self._edges[edge_id].edge for pair in wanted for edge_id in self._by_pair[pair]]

    async def _load_sources(self, item_ids: Iterable[uuid.UUID]) -> None:
        missing = [item_id for item_id in dict.fromkeys(item_ids) if item_id not in self._sources]
        for chunk in _chunks(missing):
            rows = await self._session.execute(
                select(graph_items.c.item_id, graph_items.c.source_event_id).where(
                    graph_items.c.item_id.in_(chunk)
                )
            )
            self._sources.update({row.item_id: row.source_event_id for row in rows})
        self._sources.update({item_id: None for item_id in missing if item_id not in self._sources})

    async def _load_nodes(self, keys: Iterable[_UserKey]) -> None:
        missing = [key for key in dict.fromkeys(keys) if key not in self._nodes]
        c = graph_nodes.c
        for chunk in _chunks(missing):
            rows = await self._session.execute(
                select(c.tenant, c.user_id, c.name_key).where(
                    tuple_(c.tenant, c.user_id, c.name_key).in_(chunk)
                )
            )
            self._nodes.update({(row.tenant, row.user_id, row.name_key): True for row in rows})
        self._nodes.update({key: False for key in missing if key not in self._nodes})

    async def _load_pairs(self, pairs: Iterable[_PairKey]) -> None:
        missing = [pair for pair in dict.fromkeys(pairs) if pair not in self._pairs]
        c = graph_edges.c
        for chunk in _chunks(missing):
            rows = await self._session.execute(
                select(graph_edges).where(
                    tuple_(c.tenant, c.user_id, c.source_key, c.relation).in_(chunk)
                )
            )
            for row in rows:
                if row.edge_id not in self._edges and row.item_id not in self._cleared:
                    self._hold(_held_edge(row))
        self._pairs.update(missing)

    # --- changes -------------------------------------------------------------------------

    def store_item(self, row: Mapping[str, object]) -> None:
        """Store an item's row, dropping what an older text of it said (mentions, edges)."""
        item_id: uuid.UUID = row["item_id"]  # type: ignore[assignment]
        self.forget_items([item_id], keep_item=True)
        self._items[item_id] = dict(row)
        self._sources[item_id] = row["source_event_id"]  # type: ignore[assignment]

    def forget_items(self, item_ids: Iterable[uuid.UUID], keep_item: bool = False) -> None:
        """Remove items' mentions and edges (a forgotten fact leaves the graph entirely)."""
        gone = set(item_ids)
        if not gone:
            return
        self._cleared |= gone
        for item_id in gone:
            self._mentions.pop(item_id, None)
            for edge_id in self._by_item.pop(item_id, {}):
                held = self._edges.pop(edge_id)
                del self._by_pair[_pair_of(held)][edge_id]
        if not keep_item:
            self._dropped |= gone
            for item_id in gone:
                self._items.pop(item_id, None)
                self._sources[item_id] = None

    async def add_nodes(
        self, scope: Scope, named: Mapping[str, tuple[str, str]], first_seen_at: datetime
    ) -> None:
        """Add a node for each named entity (key -> name, type) the user's graph lacks."""
        keys = {key: (scope.tenant, scope.user_id, key) for key in named}
        await self._load_nodes(keys.values())
        for key, (name, entity_type) in sorted(named.items()):
            if self._nodes[keys[key]]:
                continue
            self._nodes[keys[key]] = True
            self._new_nodes[keys[key]] = {
                "node_id": node_id(scope.tenant, scope.user_id, key),
                "tenant": scope.tenant,
                "user_id": scope.user_id,
                "name_key": key,
                "name": name,
                "entity_type": entity_type,
                "first_seen_at": first_seen_at,
            }

    def add_mentions(
        self, scope: Scope, item_id: uuid.UUID, keys: Iterable[str], occurred_at: datetime
    ) -> None:
        """Record that an item mentions these entities."""
        mentions = self._mentions.setdefault(item_id, {})
        for key in sorted(keys):
            mentions[(scope.tenant, scope.user_id, key)] = {
                "tenant": scope.tenant,
                "user_id": scope.user_id,
                "name_key": key,
                "item_id": item_id,
                "occurred_at": occurred_at,
            }

    def write_edges(
        self, scope: Scope, item_id: uuid.UUID, change: EdgeChange, sequence: int
    ) -> None:
        """Apply an ``EdgeChange``: end the older edges, add the item's new ones."""
        for edge_id, at in change.invalidate.items():
            held = self._edges[edge_id]
            held.edge = replace(held.edge, invalid_at=at)
            held.dirty = True
        for edge in change.insert:
            self._hold(_OwnedEdge(scope.tenant, scope.user_id, item_id, edge, sequence, dirty=True))

    def _hold(self, held: _OwnedEdge) -> None:
        edge_id = held.edge.edge_id
        if edge_id in self._edges:  # the same fact asserted again: one row, the newer values
            old = self._edges[edge_id]
            del self._by_item[old.item_id][edge_id]
            del self._by_pair[_pair_of(old)][edge_id]
        self._edges[edge_id] = held
        self._by_item[held.item_id][edge_id] = None
        self._by_pair[_pair_of(held)][edge_id] = None

    # --- write ---------------------------------------------------------------------------

    async def flush(self) -> None:
        """Write the batch's changes: deletes first, then every row that outlived them."""
        cleared, dropped = sorted(self._cleared), sorted(self._dropped)
        for chunk in _chunks(cleared):
            await self._delete(graph_mentions, chunk)
            await self._delete(graph_edges, chunk)
        for chunk in _chunks(dropped):
            await self._delete(graph_items, chunk)
        session = self._session
        await upsert(session, graph_items, list(self._items.values()), ["item_id"])
        await upsert(session, graph_nodes, list(self._new_nodes.values()), ["node_id"])
        mentions = [row for rows in self._mentions.values() for row in rows.values()]
        await upsert(session, graph_mentions, mentions, MENTION_KEY)
        edges = [_edge_row(held) for held in self._edges.values() if held.dirty]
        await upsert(session, graph_edges, edges, ["edge_id"])

    async def _delete(self, table: Table, item_ids: Sequence[uuid.UUID]) -> None:
        await self._session.execute(delete(table).where(table.c.item_id.in_(item_ids)))


MENTION_KEY = ["tenant", "user_id", "name_key", "item_id"]


def _pair_of(held: _OwnedEdge) -> _PairKey:
    return (held.tenant, held.user_id, held.edge.source, held.edge.relation)


def _in_session(row: Mapping[str, object], scope: Scope) -> bool:
    return (row["tenant"], row["user_id"], row["session_id"]) == (
        scope.tenant,
        scope.user_id,
        scope.session_id,
    )


T = TypeVar("T")


def _chunks(values: Sequence[T]) -> Iterable[Sequence[T]]:
    return (values[start : start + _CHUNK] for start in range(0, len(values), _CHUNK))


def _utc_or_none(at: datetime | None) -> datetime | None:
    return None if at is None else stored_utc(at)


def _held_edge(row: Row[Any]) -> _OwnedEdge:
    edge = TimedEdge(
        row.edge_id,
        row.source_key,
        row.relation,
        row.target_key,
        stored_utc(row.valid_at),
        _utc_or_none(row.invalid_at),
    )
    return _OwnedEdge(row.tenant, row.user_id, row.item_id, edge, row.stream_seq, dirty=False)


def _edge_row(held: _OwnedEdge) -> dict[str, object]:
    edge = held.edge
    return {
        "edge_id": edge.edge_id,
        "tenant": held.tenant,
        "user_id": held.user_id,
        "source_key": edge.source,
        "relation": edge.relation,
        "target_key": edge.target,
        "item_id": held.item_id,
        "valid_at": stored_utc(edge.valid_at),
        "invalid_at": _utc_or_none(edge.invalid_at),
        "stream_seq": held.sequence,
    }
