"""Graph search: match the query's entities, walk valid edges to depth 2, score the items.

Scoring (a rank-only input to fusion, so only the order matters): an item that mentions a
matched entity scores 1; an item that asserted an edge reached at hop h scores 1/h, doubled
when the relation names a word of the query ("where do I live" -> ``lives_in``). The user's
own node matches first-person queries but, as it touches everything the user said, only its
edges whose relation the query names are walked. Invalidated edges are never walked.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Table, false, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.index.sparse import terms
from memoryd.shared.adapters.llm.offline import USER_ENTITY
from memoryd.shared.adapters.sql.tables import graph_edges, graph_items, graph_mentions

MAX_DEPTH = 2
# An entity mentioned by more than this share of a user's items is a hub (the user's own
# name, the other participant of a long chat): it tells items apart no better than "the".
HUB_SHARE = 0.3
_FIRST_PERSON = re.compile(r"\b(i|me|my|mine|myself|i'm|i've|i'd)\b")


@dataclass(frozen=True, slots=True)
class GraphHit:
    """An item the graph reached, with its score and what recall shows of it."""

    item_id: uuid.UUID
    score: float
    row: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class Edge:
    """A valid edge as the walk sees it."""

    source: str
    relation: str
    target: str
    item_id: uuid.UUID


def matched_entities(query: str, names: Iterable[str]) -> set[str]:
    """Return the entity keys the query names as whole words (and the user, if first person)."""
    folded = query.casefold()
    found = {key for key in names if key != USER_ENTITY and names_word(key, folded)}
    if _FIRST_PERSON.search(folded):
        found.add(USER_ENTITY)
    return found


def names_word(key: str, text: str) -> bool:
    """Say whether ``key`` occurs in ``text`` with no word character on either side.

    The same test as ``(?<!\\w)key(?!\\w)``, without compiling a pattern per name: a user's
    graph knows thousands of names and each query checks them all.
    """
    if not key:
        return False
    start = text.find(key)
    while start != -1:
        end = start + len(key)
        if not (_word_at(text, start - 1) or _word_at(text, end)):
            return True
        start = text.find(key, start + 1)
    return False


def _word_at(text: str, index: int) -> bool:
    # What ``\w`` matches in a str pattern: alphanumerics and the underscore.
    return 0 <= index < len(text) and (text[index].isalnum() or text[index] == "_")


def relation_named(relation: str, query_terms: set[str]) -> bool:
    """Say whether the query names the relation (``lives_in`` is named by "live")."""
    return bool(set(terms(relation.replace("_", " "))) & query_terms)


def walk(start: set[str], edges: Sequence[Edge], query_terms: set[str]) -> dict[uuid.UUID, float]:
    """Score the items whose edges a walk from ``start`` reaches, up to ``MAX_DEPTH`` hops.

    Each hop visits only the edges that touch its frontier (an adjacency list), and whether
    the query names a relation is decided once per distinct relation.
    """
    touching: dict[str, list[Edge]] = defaultdict(list)
    for edge in edges:
        touching[edge.source].append(edge)
        if edge.target != edge.source:
            touching[edge.target].append(edge)
    named = functools.cache(lambda relation: relation_named(relation, query_terms))
    scores: dict[uuid.UUID, float] = defaultdict(float)
    frontier, seen = set(start), set(start)
    for hop in range(1, MAX_DEPTH + 1):
        reached: set[str] = set()
        adjacent = {id(edge): edge for node in frontier for edge in touching.get(node, ())}
        for edge in adjacent.values():
            ends = {edge.source, edge.target}
            says = named(edge.relation)
            if USER_ENTITY in ends & frontier and not says:
                continue
            scores[edge.item_id] += (2.0 if says else 1.0) / hop
            reached |= ends - seen
        seen |= reached
        frontier = reached
    return scores


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


def hubs(total: int, counts: Mapping[str, int]) -> set[str]:
    """Return the entities mentioned by more than ``HUB_SHARE`` of the items."""
    return {key for key, count in counts.items() if total and count > HUB_SHARE * total}


def without_names(query: str, names: Iterable[str]) -> str:
    """Remove the names (and their possessive 's) from a query, keeping the other words."""
    for name in sorted(names, key=len, reverse=True):
        query = re.sub(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", " ", query, flags=re.IGNORECASE)
    return " ".join(query.split())


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
