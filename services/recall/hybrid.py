"""Hybrid retrieval: BM25, dense and graph streams fused by weighted RRF, then scored.

The order of work: the three streams run concurrently inside the caller's scope and return
index keys (a turn has several: itself, its window, its first-person sentences; see
``indexer.items``); weighted Reciprocal Rank Fusion (``sum w / (k + rank)``) scores each key,
plus two priors: a date stream (keys near a date the query implies, "two weeks ago") and a
speaker bonus (the query names who said it). An item scores its best key; a session scores
the sum of its best ``session_top_keys`` keys, and recall returns that session ranking too.
The item's fused score, normalised to 0..1, is multiplied by a temporal decay
``exp(-rate * hours)`` (evergreen items exempt) and combined with importance and recency into
a composite; at most ``max_per_session`` items per
session are kept, items under ``min_score`` dropped, and the rest assembled into the token
budget by ``assemble``: conversation first, then facts (memories), then episodes (turns,
pages, segments), then knowledge (facts learned), trimmed from the tail.
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.cache import ReadCache, RowsByKey, Versions
from memoryd.services.recall.dates import ImpliedDate, implied_date
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.index import Hit, ScopeFilter, SearchIndex
from memoryd.shared.adapters.sql.times import stored_utc
from memoryd.shared.contracts.recall import (
    Explanation,
    MemoryItem,
    PageItem,
    RecallRequest,
    RetrievedItem,
    SessionHit,
    StreamScore,
    StreamWeights,
)
from memoryd.shared.contracts.scope import SearchScope
from memoryd.shared.domain.graph import ScopeGraph, without_names
from memoryd.shared.domain.text import estimate_tokens
from memoryd.shared.settings import Settings
from memoryd.shared.stores.graph import GraphHit, graph_search, scope_graph
from memoryd.shared.tasks import outcome_read

STREAMS = ("bm25", "dense", "graph")
_HOURS = 3600.0
# Recency halves after 30 days: a gentle tie-breaker next to relevance, not a filter.
_RECENCY_HALF_LIFE_HOURS = 30 * 24.0
_EPISODE_KINDS = ("turn", "page", "segment")


@dataclass(frozen=True, slots=True)
class Tuning:
    """The service-wide retrieval knobs (a request may override weights and k)."""

    rrf_k: int = 60
    weights: StreamWeights = field(default_factory=StreamWeights)
    decay_per_hour: float = 0.0005
    relevance_weight: float = 1.0
    importance_weight: float = 0.2
    recency_weight: float = 0.1
    candidates: int = 50
    session_top_keys: int = 1
    speaker_bonus: float = 0.5
    date_weight: float = 0.5

    @classmethod
    def from_settings(cls, settings: Settings) -> Tuning:
        """Read the knobs from settings."""
        return cls(
            rrf_k=settings.rrf_k,
            weights=StreamWeights(
                bm25=settings.weight_bm25, dense=settings.weight_dense, graph=settings.weight_graph
            ),
            decay_per_hour=settings.decay_per_hour,
            relevance_weight=settings.score_relevance,
            importance_weight=settings.score_importance,
            recency_weight=settings.score_recency,
            candidates=settings.stream_candidates,
            session_top_keys=settings.session_top_keys,
            speaker_bonus=settings.speaker_bonus,
            date_weight=settings.weight_date,
        )


@dataclass(slots=True)
class Candidate:
    """An item one or more streams returned (through any of its keys), and its best rank in each."""

    item_id: uuid.UUID
    fields: dict[str, Any]
    streams: dict[str, StreamScore]


@dataclass(frozen=True, slots=True)
class Key:
    """One index point a stream returned, and the item it stands for."""

    point_id: uuid.UUID
    item_id: uuid.UUID
    session_id: str | None
    occurred_at: datetime
    speaker: str | None


@dataclass(frozen=True, slots=True)
class Found:
    """What the streams returned: items, their keys, and each stream's ranking of the keys."""

    candidates: dict[uuid.UUID, Candidate]
    keys: dict[uuid.UUID, Key]
    rankings: dict[str, list[uuid.UUID]]


def scope_filter(request: RecallRequest) -> ScopeFilter | None:
    """Return the index scope of a request (None: a session search with no session)."""
    scope, wide = request.scope, request.search_scope
    if wide is SearchScope.SESSION and scope.session_id is None:
        return None
    filters = request.filters
    return ScopeFilter(
        tenant=scope.tenant,
        namespace=scope.namespace,
        user_id=None if wide is SearchScope.GLOBAL else scope.user_id,
        agent_id=scope.agent_id if wide is SearchScope.AGENT else None,
        session_id=scope.session_id if wide is SearchScope.SESSION else None,
        kinds=filters.kinds if filters else None,
        categories=_values(filters.categories) if filters else None,
        memory_types=_values(filters.memory_types) if filters else None,
        occurred_after=_epoch(filters.occurred_after) if filters else None,
        occurred_before=_epoch(filters.occurred_before) if filters else None,
    )


def _values(members: Sequence[Enum] | None) -> tuple[str, ...] | None:
    return tuple(member.value for member in members) if members else None


def _epoch(when: datetime | None) -> float | None:
    return when.timestamp() if when is not None else None


def rrf(
    rankings: Mapping[str, Sequence[uuid.UUID]], weights: Mapping[str, float], k: int
) -> dict[uuid.UUID, float]:
    """Fuse rankings: each item scores ``sum over streams of weight / (k + rank)``."""
    fused: dict[uuid.UUID, float] = defaultdict(float)
    for stream, ranked in rankings.items():
        for rank, item_id in enumerate(ranked, start=1):
            fused[item_id] += weights.get(stream, 0.0) / (k + rank)
    return dict(fused)


def decay(hours: float, rate: float, evergreen: bool) -> float:
    """Return the temporal decay factor ``exp(-rate * hours)``; evergreen items keep 1."""
    if evergreen:
        return 1.0
    return math.exp(-rate * max(0.0, hours))


def recency(hours: float) -> float:
    """Return 1 for now, 0.5 after 30 days, towards 0 for the distant past."""
    return float(0.5 ** (max(0.0, hours) / _RECENCY_HALF_LIFE_HOURS))


def composite(relevance: float, importance: float, fresh: float, tuning: Tuning) -> float:
    """Blend relevance, importance and recency into one 0..1 score by the tuning's weights."""
    total = tuning.relevance_weight + tuning.importance_weight + tuning.recency_weight
    if total == 0:
        return relevance
    blended = (
        tuning.relevance_weight * relevance
        + tuning.importance_weight * importance
        + tuning.recency_weight * fresh
    )
    return blended / total


class InSession(Protocol):
    """Anything ranked that may belong to a session."""

    @property
    def session_id(self) -> str | None:
        """Return the session it belongs to (None: none)."""
        ...


SessionT = TypeVar("SessionT", bound=InSession)


def cap_per_session(items: Sequence[SessionT], limit: int | None) -> list[SessionT]:
    """Keep at most ``limit`` items of any one session, best first (no session: no cap)."""
    if limit is None:
        return list(items)
    seen: dict[str, int] = defaultdict(int)
    kept = []
    for item in items:
        if item.session_id is not None:
            seen[item.session_id] += 1
            if seen[item.session_id] > limit:
                continue
        kept.append(item)
    return kept


def _hit_fields(hit: Hit) -> dict[str, Any]:
    payload = hit.payload
    return {
        "kind": payload.kind,
        # A window or fact key shows the turn it stands for, not the key's own text.
        "text": payload.extra.get("text", hit.text),
        "user_id": payload.user_id,
        "agent_id": payload.agent_id,
        "session_id": payload.session_id,
        "turn_id": payload.turn_id,
        "memory_id": payload.extra.get("memory_id"),
        "category": payload.category,
        "importance": payload.importance,
        "evergreen": payload.evergreen,
        "occurred_at": datetime.fromtimestamp(payload.occurred_at, UTC),
    }


def _graph_fields(hit: GraphHit) -> dict[str, Any]:
    row = hit.row
    memory_id = row.get("memory_id")
    return {
        "kind": row["kind"],
        "text": row["text"],
        "user_id": row["user_id"],
        "agent_id": row["agent_id"],
        "session_id": row["session_id"],
        "turn_id": None if memory_id else str(row["source_event_id"]),
        "memory_id": str(memory_id) if memory_id else None,
        "category": row["category"],
        "importance": 0.5,
        "evergreen": False,
        "occurred_at": _stored_time(row["occurred_at"]),
    }


def _stored_time(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"a graph item's occurred_at is {type(value).__name__}, not a datetime")
    return stored_utc(value)


def _key_of(hit: Hit | GraphHit, fields: Mapping[str, Any]) -> Key:
    if isinstance(hit, Hit):
        extra = hit.payload.extra
        item_id = uuid.UUID(extra["of"]) if "of" in extra else hit.id
        return Key(
            hit.id, item_id, fields["session_id"], fields["occurred_at"], extra.get("speaker")
        )
    return Key(hit.item_id, hit.item_id, fields["session_id"], fields["occurred_at"], None)


class HitFields:
    """What recall shows of each hit and the key it stands for, derived once per stored point.

    A hit carries the index's decoded payload, the same object from one search to the next
    until a write touches the point (a graph hit: the row held for its scope); what is derived
    from it is kept while the hit still carries that object. Deriving it (an item id parsed,
    a timestamp, a dict of eleven fields) cost ~1 ms of a recall's ~10 over ~120 hits.
    Bounded: past ``max_points`` per kind it is emptied and fills again.
    """

    def __init__(self, max_points: int = 50_000) -> None:
        """Keep at most ``max_points`` index points and as many graph items."""
        self._max_points = max_points
        self._points: dict[uuid.UUID, tuple[object, dict[str, Any], Key]] = {}
        self._items: dict[uuid.UUID, tuple[object, dict[str, Any], Key]] = {}

    def of(self, hit: Hit | GraphHit) -> tuple[dict[str, Any], Key]:
        """Return the hit's fields (not to be changed: they are shared) and its key."""
        source: object
        if isinstance(hit, Hit):
            held, point, source = self._points, hit.id, hit.payload
        else:
            held, point, source = self._items, hit.item_id, hit.row
        known = held.get(point)
        if known is not None and known[0] is source:
            return known[1], known[2]
        fields = _hit_fields(hit) if isinstance(hit, Hit) else _graph_fields(hit)
        key = _key_of(hit, fields)
        if len(held) >= self._max_points:
            held.clear()
        held[point] = (source, fields, key)
        return fields, key


def collect(
    streams: Mapping[str, Sequence[Hit | GraphHit]], derived: HitFields | None = None
) -> Found:
    """Merge the streams' hits: keys to their items, each stream's key ranking, best ranks.

    ``derived`` holds what earlier requests derived from the same points (default: none).
    """
    derived = derived if derived is not None else HitFields()
    candidates: dict[uuid.UUID, Candidate] = {}
    keys: dict[uuid.UUID, Key] = {}
    rankings: dict[str, list[uuid.UUID]] = {}
    for name, hits in streams.items():
        ranking = rankings.setdefault(name, [])
        for rank, hit in enumerate(hits, start=1):
            fields, key = derived.of(hit)
            key = keys.setdefault(key.point_id, key)
            ranking.append(key.point_id)
            candidate = candidates.get(key.item_id)
            if candidate is None:
                candidate = candidates[key.item_id] = Candidate(key.item_id, fields, {})
            if name not in candidate.streams or rank < candidate.streams[name].rank:
                # Built, not validated: an int and a float, ~2 us a hit.
                candidate.streams[name] = StreamScore.model_construct(
                    rank=rank, score=round(hit.score, 6)
                )
    return Found(candidates, keys, rankings)


def date_ranking(keys: Mapping[uuid.UUID, Key], when: ImpliedDate) -> dict[uuid.UUID, int]:
    """Rank the keys near the implied date by whole days away (same day, same rank)."""
    days = {
        point: round(gap)
        for point, key in keys.items()
        if (gap := when.distance_days(key.occurred_at)) is not None
    }
    places = {gap: place for place, gap in enumerate(sorted(set(days.values())), start=1)}
    return {point: places[gap] for point, gap in days.items()}


def names_speaker(query: str, speaker: str | None) -> bool:
    """Say whether the query names the speaker (as a whole word, any case)."""
    if not speaker:
        return False
    return re.search(rf"(?<!\w){re.escape(speaker)}(?!\w)", query, re.IGNORECASE) is not None


@dataclass(frozen=True, slots=True)
class Priors:
    """What a query adds to its keys' fused scores besides the streams."""

    query: str = ""
    date: ImpliedDate | None = None
    speaker_bonus: float = 0.0
    date_weight: float = 0.0


def key_scores(
    found: Found, weight_of: Mapping[str, float], k: int, priors: Priors
) -> tuple[dict[uuid.UUID, float], float]:
    """Score every key: RRF over the streams plus the date and speaker priors.

    Return the scores and the best score a key could reach (to normalise by).
    """
    scores = defaultdict(float, rrf(found.rankings, weight_of, k))
    best = sum(
        weight_of.get(name, 0.0) / (k + 1) for name, ranked in found.rankings.items() if ranked
    )
    if priors.date is not None and priors.date_weight > 0:
        near = date_ranking(found.keys, priors.date)
        best += _add_prior(scores, near, priors.date_weight, k)
    if priors.speaker_bonus > 0:
        named = {p: 1 for p, key in found.keys.items() if names_speaker(priors.query, key.speaker)}
        best += _add_prior(scores, named, priors.speaker_bonus, k)
    return dict(scores), best or 1.0


def _add_prior(
    scores: dict[uuid.UUID, float], places: Mapping[uuid.UUID, int], weight: float, k: int
) -> float:
    """Add ``weight / (k + place)`` to each placed key's score; return what the best can gain."""
    for point, place in places.items():
        scores[point] += weight / (k + place)
    return weight / (k + 1) if places else 0.0


def item_scores(
    keys: Mapping[uuid.UUID, Key], scores: Mapping[uuid.UUID, float]
) -> dict[uuid.UUID, float]:
    """Score each item by its best key."""
    best: dict[uuid.UUID, float] = defaultdict(float)
    for point, key in keys.items():
        best[key.item_id] = max(best[key.item_id], scores.get(point, 0.0))
    return dict(best)


def session_ranking(
    keys: Mapping[uuid.UUID, Key], scores: Mapping[uuid.UUID, float], top: int
) -> list[SessionHit]:
    """Rank sessions by the sum of their ``top`` best key scores (items with no session: none).

    A session that answers a question tends to match it more than once (the question and its
    answer, a fact and its context), so the sum tells it apart from one lucky turn elsewhere.
    """
    per_session: dict[str, list[float]] = defaultdict(list)
    for point, key in keys.items():
        if key.session_id is not None:
            per_session[key.session_id].append(scores.get(point, 0.0))
    totals = {sid: sum(sorted(found, reverse=True)[:top]) for sid, found in per_session.items()}
    ranked = sorted(totals, key=lambda sid: (-totals[sid], sid))
    return [SessionHit(session_id=sid, score=round(totals[sid], 6)) for sid in ranked]


@dataclass(frozen=True, slots=True)
class Limits:
    """Which scored items a request keeps: over ``min_score``, ``max_per_session``, ``limit``."""

    limit: int | None = None
    min_score: float = 0.0
    max_per_session: int | None = None

    @classmethod
    def of(cls, request: RecallRequest) -> Limits:
        """Return the request's limits."""
        return cls(request.limit, request.min_score, request.max_per_session)

    def apply(
        self, ranked: Sequence[SessionT], score_of: Callable[[SessionT], float]
    ) -> list[SessionT]:
        """Return the ranked items these limits keep, in order."""
        scored = [item for item in ranked if score_of(item) >= self.min_score]
        return cap_per_session(scored, self.max_per_session)[: self.limit]


@dataclass(frozen=True, slots=True)
class Blend:
    """A candidate's score and its parts: fused, relevance (decayed), recency, composite."""

    candidate: Candidate
    fused: float
    relevance: float
    factor: float
    fresh: float
    final: float  # rounded to 6 places, as the item shows it

    @property
    def session_id(self) -> str | None:
        """Return the candidate's session."""
        session: str | None = self.candidate.fields["session_id"]
        return session

    def order(self) -> tuple[float, float, int]:
        """Return the sort key: best score, then newest, then item id."""
        fields = self.candidate.fields
        # A UUID's int orders as its string (fixed-width hex), without building the string.
        return (-self.final, -fields["occurred_at"].timestamp(), self.candidate.item_id.int)


def score(
    found: Found,
    weights: StreamWeights,
    k: int,
    tuning: Tuning,
    *,
    now: datetime,
    explain: bool,
    priors: Priors = Priors(),
    limits: Limits = Limits(),
) -> tuple[list[RetrievedItem], list[SessionHit]]:
    """Fuse, decay and blend each candidate's score; return the items and sessions, best first.

    Every candidate is scored; only the ones ``limits`` keeps are built into items.
    """
    weight_of = {name: getattr(weights, name) for name in STREAMS}
    per_key, best = key_scores(found, weight_of, k, priors)
    fused = item_scores(found.keys, per_key)
    blends = [
        blend(candidate, fused.get(candidate.item_id, 0.0), best, tuning, now=now)
        for candidate in found.candidates.values()
    ]
    blends.sort(key=Blend.order)
    kept = limits.apply(blends, lambda scored: scored.final)
    sessions = session_ranking(found.keys, per_key, tuning.session_top_keys)
    return [retrieved(b, explain) for b in kept], sessions[: limits.limit]


def blend(
    candidate: Candidate, fused: float, best: float, tuning: Tuning, *, now: datetime
) -> Blend:
    """Decay a candidate's fused score (over the best reachable) and blend it into a composite."""
    fields = candidate.fields
    hours = (now - fields["occurred_at"]).total_seconds() / _HOURS
    factor = decay(hours, tuning.decay_per_hour, fields["evergreen"])
    relevance = fused / best * factor
    fresh = recency(hours)
    final = composite(relevance, fields["importance"], fresh, tuning)
    return Blend(candidate, fused, relevance, factor, fresh, round(final, 6))


def retrieved(scored: Blend, explain: bool) -> RetrievedItem:
    """Return a scored candidate as a recall item (with its explanation if asked)."""
    candidate, fields = scored.candidate, scored.candidate.fields
    explanation = (
        Explanation(
            streams=candidate.streams,
            fused=round(scored.fused, 6),
            relevance=round(scored.relevance, 6),
            decay=round(scored.factor, 6),
            importance=fields["importance"],
            recency=round(scored.fresh, 6),
            composite=scored.final,
        )
        if explain
        else None
    )
    # The fields are typed already (_hit_fields, _graph_fields): built, not validated again,
    # which cost ~5 us an item.
    return RetrievedItem.model_construct(
        item_id=candidate.item_id, score=scored.final, explanation=explanation, **fields
    )


def query_priors(query: str, now: datetime, tuning: Tuning) -> Priors:
    """Return what a query adds besides the streams: the date it implies, the speaker bonus."""
    return Priors(
        query=query,
        date=implied_date(query, now),
        speaker_bonus=tuning.speaker_bonus,
        date_weight=tuning.date_weight,
    )


class HybridRetriever:
    """Run the three streams for a request and return its scored, capped items."""

    def __init__(
        self,
        index: SearchIndex,
        embedder: Embedder,
        sessions: async_sessionmaker[AsyncSession],
        tuning: Tuning = Tuning(),
        cache: ReadCache | None = None,
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._sessions = sessions
        self.tuning = tuning
        self._cache = cache if cache is not None else ReadCache()
        self._graph_items = RowsByKey()
        self._derived = HitFields()

    def start_query(self, request: RecallRequest) -> None:
        """Start embedding the request's query now, before its versions are read.

        The query's vector is on the dense stream's path (and the tiers'), and the model was
        idle while recall read the read models' versions: at 5,000 turns in one scope a
        question's embedding took 11.5 of a recall's 20 ms. Begun here, the dense stream
        (whose text is the query, unless it names a hub) and the tiers find it in flight or
        held (``CachedEmbedder``); it is the same lone model call they would have made.
        """
        weights = request.weights or self.tuning.weights
        if weights.dense > 0 and request.query.strip() and scope_filter(request) is not None:
            started = asyncio.ensure_future(self._embedder.embed([request.query]))
            started.add_done_callback(outcome_read)

    async def retrieve(
        self, request: RecallRequest, now: datetime, at: Versions
    ) -> tuple[list[RetrievedItem], list[SessionHit]]:
        """Return the request's items (at most ``request.limit``) and sessions, best first.

        ``at``: the read models' versions, read before this request read any.
        """
        where = scope_filter(request)
        if where is None or not request.query.strip():
            return [], []
        weights = request.weights or self.tuning.weights
        k = request.rrf_k or self.tuning.rrf_k
        now = request.as_of or now
        streams = await self._streams(request.query, where, weights, at)
        priors = query_priors(request.query, now, self.tuning)
        found = collect(streams, self._derived)
        return score(
            found,
            weights,
            k,
            self.tuning,
            now=now,
            explain=request.explain,
            priors=priors,
            limits=Limits.of(request),
        )

    async def _streams(
        self, query: str, where: ScopeFilter, weights: StreamWeights, at: Versions
    ) -> dict[str, Sequence[Hit | GraphHit]]:
        limit = self.tuning.candidates
        jobs: dict[str, Any] = {}
        if weights.bm25 > 0:
            jobs["bm25"] = self._index.search_sparse(query, where, limit)
        if weights.dense > 0 or weights.graph > 0:
            # Both need the scope's graph (its hubs, its names): read it once, while BM25 runs.
            graph = asyncio.ensure_future(self._scope_graph(where, at))
        if weights.dense > 0:
            jobs["dense"] = self._dense(query, where, limit, graph)
        if weights.graph > 0:
            jobs["graph"] = self._graph(query, where, limit, graph, at)
        results = await asyncio.gather(*jobs.values())
        return dict(zip(jobs, results, strict=True))

    async def _scope_graph(self, where: ScopeFilter, at: Versions) -> ScopeGraph:
        # Every mention and every valid edge grow with the scope's items: kept between graph
        # writes. They depend on the owner alone, not on the filters.
        owner = ScopeFilter(tenant=where.tenant, user_id=where.user_id)
        return await self._cache.held(
            self._sessions,
            subjects.GRAPH_CONSUMER,
            ("graph", owner.tenant, owner.user_id),
            lambda fresh: scope_graph(fresh, owner),
            at,
            user=(owner.tenant, owner.user_id),
        )

    async def _dense(
        self,
        query: str,
        where: ScopeFilter,
        limit: int,
        graph: asyncio.Future[ScopeGraph],
    ) -> list[Hit]:
        # MiniLM lets a name dominate a sentence's embedding, so a name that is in most of the
        # user's items (their own, a chat partner's) drags the turns that merely address that
        # person to the top; the dense query leaves such hub names out (BM25's IDF already
        # discounts them).
        focused = without_names(query, (await graph).hubs) or query
        vector = (await self._embedder.embed([focused]))[0]
        return await self._index.search_dense(vector, where, limit)

    async def _graph(
        self,
        query: str,
        where: ScopeFilter,
        limit: int,
        graph: asyncio.Future[ScopeGraph],
        at: Versions,
    ) -> list[GraphHit]:
        held = await graph
        # The items a search reaches are read by key once per graph write, not per request.
        version, _ = at.of(subjects.GRAPH_CONSUMER, (where.tenant, where.user_id))
        known = self._graph_items.at(version, where)
        async with self._sessions() as session:
            return await graph_search(session, query, where, limit, held, known=known)


def _section(
    title: str, lines: Sequence[str], used: int, budget: int
) -> tuple[list[str], int, int]:
    """Keep the lines that fit the budget in order, the title costing its share too.

    Return the section's lines, the tokens used so far, and how many lines were kept.
    """
    kept: list[str] = []
    header = estimate_tokens(title + "\n")
    for line in lines:
        cost = estimate_tokens(line + "\n") + (0 if kept else header)
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return ([title, *kept] if kept else []), used, len(kept)


def assemble(
    pages: Sequence[PageItem],
    memories: Sequence[MemoryItem],
    items: Sequence[RetrievedItem],
    max_tokens: int,
) -> tuple[str, list[PageItem], list[MemoryItem], list[RetrievedItem], int]:
    """Assemble the context in budget: conversation, memories, episodes, knowledge.

    The newest pages are kept when the budget is short; every other section keeps its best
    items first and is trimmed from the tail. Memories are rendered from ``memories`` only:
    an item of kind "memory" is kept when its memory is shown, never rendered twice. What
    is returned is exactly what the context shows.
    Titles count, so the whole context never exceeds ``max_tokens`` (by ``estimate_tokens``).
    """
    conversation, kept_pages, used = _recent_pages(pages, max_tokens)
    facts, used, n_facts = _section(
        "## Memories", [f"- {m.content}" for m in memories], used, max_tokens
    )
    kept_memories = list(memories[:n_facts])
    shown, episodes_in = shown_already(items, kept_memories, kept_pages)
    episodes, used, n_episodes = _section(
        "## Related conversation", [f"- {i.text}" for i in episodes_in], used, max_tokens
    )
    knowledge_in = [i for i in items if i.kind == "fact"]
    knowledge, used, n_knowledge = _section(
        "## Knowledge", [f"- {i.text}" for i in knowledge_in], used, max_tokens
    )
    kept = shown + episodes_in[:n_episodes] + knowledge_in[:n_knowledge]
    context = "\n".join(conversation + facts + episodes + knowledge)
    return context, kept_pages, kept_memories, in_order(kept, items), used


def shown_already(
    items: Sequence[RetrievedItem], memories: Sequence[MemoryItem], pages: Sequence[PageItem]
) -> tuple[list[RetrievedItem], list[RetrievedItem]]:
    """Split off the items the memories and pages show already; return them and the episodes."""
    shown = {str(m.memory_id) for m in memories}
    on_page = {str(page.turn_id) for page in pages}
    # A memory item is shown as its memory (the SQL row: the index may lag a forget).
    kept = [i for i in items if i.kind == "memory" and i.memory_id in shown]
    # A turn already shown as a recent page is in the context: keep it, at no cost.
    kept += [i for i in items if i.kind in _EPISODE_KINDS and i.turn_id in on_page]
    episodes = [i for i in items if i.kind in _EPISODE_KINDS and i.turn_id not in on_page]
    return kept, episodes


def in_order(kept: Sequence[RetrievedItem], items: Sequence[RetrievedItem]) -> list[RetrievedItem]:
    """Return ``kept`` in the order of ``items`` (best first)."""
    order = {item.item_id: n for n, item in enumerate(items)}
    return sorted(kept, key=lambda item: order[item.item_id])


def _recent_pages(
    pages: Sequence[PageItem], max_tokens: int
) -> tuple[list[str], list[PageItem], int]:
    """Return the conversation section's lines, the pages it keeps (newest) and its cost."""
    title = "## Recent conversation"
    used = estimate_tokens(title + "\n") if pages else 0
    kept: list[PageItem] = []
    for page in reversed(pages):
        cost = estimate_tokens(f"User: {page.query}\nAgent: {page.response}\n")
        if used + cost > max_tokens:
            break
        kept.insert(0, page)
        used += cost
    if not kept:
        return [], [], 0
    lines = [title]
    for page in kept:
        lines += [f"User: {page.query}", f"Agent: {page.response}"]
    return lines, kept, used
