"""The knowledge graph's pure logic: entity keys, the bi-temporal edge rule, and the walk.

Graph search scores (a rank-only input to fusion, so only the order matters): an item that
mentions a matched entity scores ``ln(1 + items / mentions)`` for it, so a rare entity says more
(a hub says nothing: it is not matched); an item that asserted an edge reached at hop h scores 1/h,
doubled when the relation names a word of the query ("where do I live" -> ``lives_in``). The
user's own node matches first-person queries but, as it touches everything the user said, only
its edges whose relation the query names are walked. Invalidated edges are never walked.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from memoryd.shared.adapters.llm.offline import USER_ENTITY
from memoryd.shared.contracts.events import derived_id
from memoryd.shared.contracts.retrieval import GraphExtracted
from memoryd.shared.domain.text import terms

# Relations a subject holds with one target at a time: a newer target contradicts the older.
SINGLE_VALUED = frozenset(
    {
        "lives_in",
        "works_at",
        "works_as",
        "studies_at",
        "is_named",
        "has_name",
        "married_to",
        "has_partner",
        "has_husband",
        "has_wife",
        "has_boyfriend",
        "has_girlfriend",
        "has_age",
        "drives",
    }
)


def name_key(name: str) -> str:
    """Return the key two spellings of one entity share (case and spacing folded)."""
    return " ".join(name.casefold().split())


NODE_NAMESPACE = uuid.UUID("3c2f8a51-6d0e-4b8e-9f4a-2b7c1d9e5a33")


def node_id(tenant: str, user_id: str, key: str) -> uuid.UUID:
    """Return the id of a user's entity node: one node per casefolded name."""
    return uuid.uuid5(NODE_NAMESPACE, f"{tenant}/{user_id}/{key}")


def named_entities(event: GraphExtracted) -> dict[str, tuple[str, str]]:
    """Return each entity an extraction names (key -> name, type); relation ends are things."""
    named = {name_key(e.name): (e.name, e.entity_type) for e in event.entities}
    for relation in event.relations:
        for name in (relation.source, relation.target):
            named.setdefault(name_key(name), (name, "thing"))
    return named


def mentioned(event: GraphExtracted) -> set[str]:
    """Return the entities an extraction's item mentions: its entities and relation targets."""
    return {name_key(e.name) for e in event.entities} | {
        name_key(r.target) for r in event.relations
    }


@dataclass(frozen=True, slots=True)
class TimedEdge:
    """A fact ``source -relation-> target``, true from ``valid_at`` until ``invalid_at``."""

    edge_id: uuid.UUID
    source: str
    relation: str
    target: str
    valid_at: datetime
    invalid_at: datetime | None = None


def asserted_edges(event: GraphExtracted) -> list[TimedEdge]:
    """Return the facts an extraction asserts, in order, valid from when they were said."""
    return [
        TimedEdge(
            edge_id=derived_id(event.event_id, f"edge.{number}"),
            source=name_key(r.source),
            relation=r.relation,
            target=name_key(r.target),
            valid_at=event.valid_at,
        )
        for number, r in enumerate(event.relations)
    ]


@dataclass(frozen=True, slots=True)
class EdgeChange:
    """What new facts do to the graph: rows to insert, older edges that end (edge -> when)."""

    insert: tuple[TimedEdge, ...] = ()
    invalidate: Mapping[uuid.UUID, datetime] = field(default_factory=dict)


def add_edge(current: Iterable[TimedEdge], new: TimedEdge) -> EdgeChange:
    """Return what one new fact does, given the edges of its source and relation so far.

    The bi-temporal rule: for a single-valued relation, a fact with another target that was
    still valid when the new one starts ends there (``invalid_at``); if a fact with another
    target starts later, the new one ends when that one starts. Edges are never deleted, so
    history stays queryable. Other relations hold many targets: nothing ends.
    """
    if new.relation not in SINGLE_VALUED:
        return EdgeChange((new,))
    rivals = [
        e
        for e in current
        if (e.source, e.relation) == (new.source, new.relation) and e.target != new.target
    ]
    ended = {
        e.edge_id: new.valid_at
        for e in rivals
        if e.invalid_at is None and e.valid_at <= new.valid_at
    }
    later = [e.valid_at for e in rivals if e.valid_at > new.valid_at]
    return EdgeChange((replace(new, invalid_at=min(later, default=None)),), ended)


def add_edges(current: Iterable[TimedEdge], new: Iterable[TimedEdge]) -> EdgeChange:
    """Apply ``add_edge`` to several facts in order (a later one may end an earlier one)."""
    edges = {e.edge_id: e for e in current}
    inserted: dict[uuid.UUID, None] = {}
    ended: dict[uuid.UUID, datetime] = {}
    for fact in new:
        change = add_edge(edges.values(), fact)
        for edge_id, at in change.invalidate.items():
            edges[edge_id] = replace(edges[edge_id], invalid_at=at)
            if edge_id not in inserted:
                ended[edge_id] = at
        for edge in change.insert:
            edges[edge.edge_id] = edge
            inserted[edge.edge_id] = None
    return EdgeChange(tuple(edges[edge_id] for edge_id in inserted), ended)


MAX_DEPTH = 2
# An entity mentioned by more than this share of a user's items is a hub (the user's own
# name, the other participant of a long chat): it tells items apart no better than "the".
HUB_SHARE = 0.3
_FIRST_PERSON = re.compile(r"\b(i|me|my|mine|myself|i'm|i've|i'd)\b")


@dataclass(frozen=True, slots=True)
class Edge:
    """A valid edge as the walk sees it."""

    source: str
    relation: str
    target: str
    item_id: uuid.UUID


_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class EntityNames:
    """A scope's entity keys, filed under their first word for whole-word matching.

    A key named as whole words in a text has each of its words as a whole word of the text
    (the key's own ends sit on non-word characters there), so only keys whose first word is
    one of the query's words can match: a query checks a handful, not every name it knows.
    """

    by_first_word: Mapping[str, tuple[str, ...]]
    wordless: tuple[str, ...] = ()  # keys with no word character at all: always checked

    @classmethod
    def of(cls, keys: Iterable[str]) -> EntityNames:
        """Index ``keys`` (the user entity left out: first person names it)."""
        filed: dict[str, list[str]] = defaultdict(list)
        wordless = []
        for key in keys:
            if key == USER_ENTITY:
                continue
            first = _WORD.search(key)
            if first is None:
                wordless.append(key)
            else:
                filed[first.group()].append(key)
        return cls({word: tuple(found) for word, found in filed.items()}, tuple(wordless))

    def named_in(self, folded: str) -> set[str]:
        """Return the keys the casefolded text names as whole words."""
        words = set(_WORD.findall(folded))
        candidates = [key for word in words for key in self.by_first_word.get(word, ())]
        return {key for key in (*candidates, *self.wordless) if names_word(key, folded)}


def matched_entities(query: str, names: Iterable[str] | EntityNames) -> set[str]:
    """Return the entity keys the query names as whole words (and the user, if first person)."""
    folded = query.casefold()
    index = names if isinstance(names, EntityNames) else EntityNames.of(names)
    found = index.named_in(folded)
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
    touching = _edges_by_node(edges)
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


def graph_scores(
    mentions: Iterable[tuple[uuid.UUID, str]],
    reached: Mapping[uuid.UUID, float],
    total: int,
    counts: Mapping[str, int],
) -> dict[uuid.UUID, float]:
    """Score items by the (item, entity) mentions of matched entities, plus what the walk gave.

    ``total`` is how many items the scope holds and ``counts`` how many mention each entity.
    """
    scores: dict[uuid.UUID, float] = defaultdict(float)
    for item_id, key in mentions:
        scores[item_id] += math.log(1 + total / max(1, counts.get(key, 1)))
    for item_id, score in reached.items():
        scores[item_id] += score
    return dict(scores)


def _edges_by_node(edges: Sequence[Edge]) -> dict[str, list[Edge]]:
    touching: dict[str, list[Edge]] = defaultdict(list)
    for edge in edges:
        touching[edge.source].append(edge)
        if edge.target != edge.source:
            touching[edge.target].append(edge)
    return touching


@dataclass(frozen=True, slots=True)
class ScopeGraph:
    """What every graph search in a scope reads, until the graph changes.

    ``total`` items, the items that mention each entity (``mentions``, by the text of their
    ids) and how many (``counts``), the ``hubs`` among them, the entity ``names`` indexed for
    matching, and the ``edges`` no later fact ended.

    An item id becomes a UUID only when a query reaches its entity: at 1,000 turns a user's
    graph holds ~1,300 mentions, and building their UUIDs was 5 of the 15 ms a user's first
    recall spent reading the graph, each one an object the garbage collector walks.
    """

    total: int
    mentions: Mapping[str, Sequence[str]]
    counts: Mapping[str, int]
    hubs: frozenset[str]
    names: EntityNames
    edges: Sequence[Edge]

    @classmethod
    def of(
        cls, total: int, mentions: Mapping[str, Sequence[str]], edges: Sequence[Edge]
    ) -> ScopeGraph:
        """Derive the counts, the hubs and the name index from the mentions."""
        counts = {key: len(items) for key, items in mentions.items()}
        return cls(
            total,
            mentions,
            counts,
            frozenset(hubs(total, counts)),
            EntityNames.of(counts),
            edges,
        )

    def mentioning(self, keys: Iterable[str]) -> list[tuple[uuid.UUID, str]]:
        """Return the (item, entity) pairs of the items that mention these entities."""
        return [(uuid.UUID(item_id), key) for key in keys for item_id in self.mentions.get(key, ())]


def hubs(total: int, counts: Mapping[str, int]) -> set[str]:
    """Return the entities mentioned by more than ``HUB_SHARE`` of the items."""
    return {key for key, count in counts.items() if total and count > HUB_SHARE * total}


def without_names(query: str, names: Iterable[str]) -> str:
    """Remove the names (and their possessive 's) from a query, keeping the other words.

    A query that names none of them comes back as it is, not re-spaced: recall's other
    readers embed the query as written, and one text is embedded once (the model cannot
    tell the two apart, but the query cache could; a pasted page was embedded twice).
    """
    kept = query
    for name in sorted(names, key=len, reverse=True):
        kept = re.sub(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", " ", kept, flags=re.IGNORECASE)
    return query if kept == query else " ".join(kept.split())
