"""The MemoryOS part of recall: STM chains, the top MTM segments and pages, the LPM persona.

Read-only: the workers precomputed every vector, so recall embeds the query once (only when
the user has segments or facts) and never calls the LLM. The segments it used are returned
as a segments-visited event for the caller to record, so heat is a fold of the log.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.cache import CountedRows, DecodedRows, ReadCache, User, Versions
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.llm import OfflineExtractor, PageText
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.contracts.memoryos import SegmentsVisited
from memoryd.shared.contracts.recall import (
    FactItem,
    MemoryOsContext,
    PageItem,
    ProfileItem,
    Provenance,
    RecallRequest,
    RecallResponse,
    SegmentItem,
    SegmentPageItem,
    TraitItem,
)
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain import lpm
from memoryd.shared.domain.memoryos import (
    MemoryOsParams,
    Ranked,
    Stacked,
    Vector,
    decode_vector,
    rank_by_similarity,
)
from memoryd.shared.domain.mtm import Segment, SegmentIndex, heat
from memoryd.shared.domain.text import estimate_tokens
from memoryd.shared.stores import chain as chain_store
from memoryd.shared.stores import mtm as mtm_store
from memoryd.shared.stores.persona import Persona, load_persona, load_provenance


@dataclass(frozen=True, slots=True)
class _Page:
    """A filed page as similarity ranking sees it."""

    row: Mapping[str, Any]
    vector: Vector

    @property
    def key(self) -> str:
        """Return the turn id, the key ties are broken by."""
        return str(self.row["turn_id"])


def with_meta_chains(pages: Sequence[PageItem], chains: Mapping[uuid.UUID, str]) -> list[PageItem]:
    """Return the STM pages with the summary of the chain each belongs to."""
    return [page.model_copy(update={"meta_chain": chains.get(page.turn_id, "")}) for page in pages]


async def load_pages(session: AsyncSession, segment_ids: Sequence[str]) -> list[_Page]:
    """Return the filed pages of the given segments with their vectors."""
    rows = await mtm_store.segment_pages(session, segment_ids)
    # The stored vector's text is dropped once decoded: recall holds pages between visits.
    return [
        _Page({k: v for k, v in row.items() if k != "vector"}, decode_vector(row["vector"]))
        for row in rows
    ]


def _by_segment(pages: Sequence[_Page]) -> dict[str, list[_Page]]:
    grouped: dict[str, list[_Page]] = {}
    for page in pages:
        grouped.setdefault(str(page.row["segment_id"]), []).append(page)
    return grouped


def persona_sources(persona: Persona) -> set[str]:
    """Return the extraction ids behind everything the persona holds."""
    sources = {f.source for f in (*persona.knowledge.facts, *persona.agent_traits.facts)}
    sources |= {entry.source for entry in persona.profile.attributes.values()}
    sources |= {evidence.source for evidence in persona.traits.dimensions.values()}
    return sources


def visit_of(top: Sequence[Ranked[Segment]], scope: Scope, now: datetime) -> SegmentsVisited | None:
    """Return the visit to record for the segments recall used (None: it used none)."""
    if not top:
        return None
    segment_ids = tuple(entry.item.id for entry in top)
    return SegmentsVisited(occurred_at=now, scope=scope, segment_ids=segment_ids)


def segment_item(
    entry: Ranked[Segment], heat_now: float, by_segment: Mapping[str, Provenance]
) -> SegmentItem:
    """Return a ranked segment as a recall item, with its heat now and its provenance."""
    return SegmentItem(
        segment_id=entry.item.id,
        summary=entry.item.summary,
        keywords=entry.item.keywords,
        page_count=entry.item.page_count,
        heat=round(heat_now, 6),
        score=round(entry.score, 6),
        provenance=by_segment.get(entry.item.id, Provenance()),
    )


def segment_page_item(entry: Ranked[_Page]) -> SegmentPageItem:
    """Return a ranked filed page as a recall item."""
    row = entry.item.row
    return SegmentPageItem(
        turn_id=row["turn_id"],
        segment_id=row["segment_id"],
        session_id=row["session_id"],
        agent_id=row["agent_id"],
        query=row["query"],
        response=row["response"],
        occurred_at=row["occurred_at"],
        score=round(entry.score, 6),
    )


def fact_items(
    ranked: Sequence[Ranked[lpm.Fact]], provenance: Mapping[str, Provenance]
) -> list[FactItem]:
    """Return ranked facts as recall items with their provenance."""
    return [
        FactItem(
            text=entry.item.text,
            score=round(entry.score, 6),
            learned_at=entry.item.at,
            provenance=provenance.get(entry.item.source, Provenance()),
        )
        for entry in ranked
    ]


def profile_items(profile: lpm.Profile, provenance: Mapping[str, Provenance]) -> list[ProfileItem]:
    """Return every current profile attribute, by name."""
    return [
        ProfileItem(
            attribute=name,
            value=entry.value,
            since=entry.at,
            provenance=provenance.get(entry.source, Provenance()),
        )
        for name, entry in sorted(profile.attributes.items())
    ]


def trait_items(traits: lpm.Traits, provenance: Mapping[str, Provenance]) -> list[TraitItem]:
    """Return every trait with evidence, the most evidenced first."""
    ordered = sorted(traits.dimensions.items(), key=lambda pair: (-pair[1].count, pair[0]))
    return [
        TraitItem(
            trait_id=trait_id,
            evidence=evidence.latest,
            count=evidence.count,
            provenance=provenance.get(evidence.source, Provenance()),
        )
        for trait_id, evidence in ordered
    ]


def segment_provenance(pages: Sequence[_Page]) -> dict[str, Provenance]:
    """Return the turns and sessions of each segment's pages, oldest first."""
    ordered = sorted(pages, key=lambda page: (page.row["occurred_at"], page.key))
    turns: dict[str, list[uuid.UUID]] = {}
    sessions: dict[str, dict[str, None]] = {}
    for page in ordered:
        segment_id = page.row["segment_id"]
        turns.setdefault(segment_id, []).append(page.row["turn_id"])
        if page.row["session_id"]:
            sessions.setdefault(segment_id, {})[page.row["session_id"]] = None
    return {
        segment_id: Provenance(
            turn_ids=tuple(turn_ids), session_ids=tuple(sessions.get(segment_id, {}))
        )
        for segment_id, turn_ids in turns.items()
    }


def segment_line(segment: SegmentItem) -> str:
    """Render a segment: its summary, else its keywords (a segment is never shown blank)."""
    return f"- {segment.summary or ', '.join(segment.keywords) or segment.segment_id}"


# Each tier, in prompt order: its title, its field, and how one of its entries is rendered.
TIER_SECTIONS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("## User profile", "profile", lambda p: f"- {p.attribute}: {p.value}"),
    ("## What the user told before", "knowledge", lambda f: f"- {f.text}"),
    ("## Related past topics", "segments", segment_line),
    (
        "## Related past exchanges",
        "segment_pages",
        lambda p: f"User: {p.query}\nAgent: {p.response}",
    ),
    ("## User traits", "traits", lambda t: f"- {t.trait_id}: {t.evidence}"),
    ("## What the user wants from the agent", "agent_traits", lambda f: f"- {f.text}"),
)


def render_tiers(context: MemoryOsContext, max_tokens: int) -> tuple[MemoryOsContext, str, int]:
    """Render the tiers as a prompt block within ``max_tokens``, trimmed from the tail.

    Return the context holding exactly the entries the block shows (a trimmed entry leaves
    the structured fields too), the block, and the tokens it costs (titles included).
    """
    used = 0
    lines: list[str] = []
    kept: dict[str, list[Any]] = {name: [] for _, name, _ in TIER_SECTIONS}
    full = False
    for title, name, render in TIER_SECTIONS:
        for entry in getattr(context, name):
            line = render(entry)
            cost = estimate_tokens(line + "\n")
            if not kept[name]:
                cost += estimate_tokens(title + "\n")
            if full or used + cost > max_tokens:
                full = True
                break
            if not kept[name]:
                lines.append(title)
            lines.append(line)
            kept[name].append(entry)
            used += cost
    return context.model_copy(update=kept), "\n".join(lines), used


@dataclass(frozen=True, slots=True)
class _Found:
    """What recall read of a user's tiers: the query's vector, top segments and their pages."""

    query_vec: Vector | None
    top: list[Ranked[Segment]]
    pages: list[_Page]
    persona: PersonaView


def ranked_tiers(
    found: _Found, k: int
) -> tuple[list[Ranked[lpm.Fact]], list[Ranked[lpm.Fact]], list[Ranked[_Page]]]:
    """Rank facts, agent traits and pages by the query (no query: the newest facts, no pages)."""
    view = found.persona
    if found.query_vec is None:
        knowledge = [Ranked(f, 0.0) for f in reversed(view.knowledge.items)][:k]
        agent = [Ranked(f, 0.0) for f in reversed(view.agent_traits.items)][:k]
        return knowledge, agent, []
    return (
        view.knowledge.rank(found.query_vec, k),
        view.agent_traits.rank(found.query_vec, k),
        rank_by_similarity(found.query_vec, found.pages, k),
    )


def with_tiers(
    response: RecallResponse,
    pages: list[PageItem],
    context: MemoryOsContext,
    block: str,
    tokens: int,
) -> RecallResponse:
    """Return the response with its pages' chains, the tiers, and their block in its context."""
    joined = "\n".join(part for part in (response.context, block) if part)
    return response.model_copy(
        update={
            "pages": pages,
            "memoryos": context,
            "context": joined,
            "tokens": response.tokens + tokens,
        }
    )


@dataclass(frozen=True, slots=True)
class PersonaView:
    """A user's persona as recall shows it, built once per write of the persona tier.

    The items that do not depend on the query (profile, traits) are built here, and the
    facts' vectors stacked, so a request only ranks.
    """

    provenance: Mapping[str, Provenance]
    profile: list[ProfileItem]
    traits: list[TraitItem]
    knowledge: Stacked[lpm.Fact]
    agent_traits: Stacked[lpm.Fact]

    @classmethod
    def of(cls, persona: Persona, provenance: Mapping[str, Provenance]) -> PersonaView:
        """Arrange a persona and the turns behind it."""
        return cls(
            provenance,
            profile_items(persona.profile, provenance),
            trait_items(persona.traits, provenance),
            Stacked.of(persona.knowledge.facts),
            Stacked.of(persona.agent_traits.facts),
        )

    @property
    def has_facts(self) -> bool:
        """Say whether the persona holds any fact a query could rank."""
        return bool(self.knowledge.items or self.agent_traits.items)


async def _persona_view(session: AsyncSession, user: tuple[str, str]) -> PersonaView:
    """Read a persona and the turns behind it together: both are the persona worker's."""
    persona = await load_persona(session, user)
    return PersonaView.of(persona, await load_provenance(session, persona_sources(persona)))


# A user's tiers as recall ranks them: their segments and their persona.
TierState = tuple[SegmentIndex, PersonaView]

MTM, PERSONA, CHAIN = subjects.MTM_CONSUMER, subjects.PERSONA_CONSUMER, subjects.CHAIN_CONSUMER


class TierRecall:
    """Answer the MemoryOS part of a recall from the tier read models."""

    def __init__(
        self,
        embedder: Embedder,
        params: MemoryOsParams,
        cache: ReadCache | None = None,
        decoded_segments: int = 20_000,
        held_pages: int = 10_000,
    ) -> None:
        self._embedder = embedder
        self._params = params
        self._cache = cache if cache is not None else ReadCache()
        # A user's write changes a few of their segments: a reload decodes only those, and a
        # visit's (heat alone) reuses the index's arrays.
        self._segments = DecodedRows(Segment.from_json, SegmentIndex.of, decoded_segments)
        self._filed: CountedRows[_Page] = CountedRows(held_pages)
        self._keywords = OfflineExtractor()  # rules only: recall never calls an LLM

    @property
    def segments_decoded(self) -> int:
        """Return how many stored segments recall has decoded (for tests and figures)."""
        return self._segments.decoded

    @property
    def pages_read(self) -> int:
        """Return how many segments' pages recall has read (for tests and figures)."""
        return self._filed.read

    @property
    def pages_held(self) -> int:
        """Return how many filed pages recall holds."""
        return len(self._filed)

    @property
    def segments_held(self) -> int:
        """Return how many decoded segments recall holds beside their stored text."""
        return len(self._segments)

    async def enrich(
        self,
        sessions: async_sessionmaker[AsyncSession],
        request: RecallRequest,
        response: RecallResponse,
        now: datetime,
        at: Versions,
        *,
        state: Awaitable[TierState] | None = None,
    ) -> tuple[RecallResponse, SegmentsVisited | None]:
        """Add the tiers to ``response``; return it and the visit to record (None: none).

        ``at`` holds the versions of the read models, read before this request read any;
        ``state``: the user's tiers as ``read_state`` began reading them (None: read here).
        """
        user = (request.scope.tenant, request.scope.user_id)
        pages = await self._with_chains(sessions, response.pages, at, user)
        if state is None:
            state = self.read_state(sessions, request.scope, at)
        found = await self._find(sessions, request, at, await state)
        remaining = max(0, request.max_tokens - response.tokens)
        context, block, tokens = render_tiers(self._context(found, now), remaining)
        enriched = with_tiers(response, pages, context, block, tokens)
        return enriched, visit_of(found.top, request.scope, now)

    async def _with_chains(
        self,
        sessions: async_sessionmaker[AsyncSession],
        pages: list[PageItem],
        at: Versions,
        user: User,
    ) -> list[PageItem]:
        """Return the STM pages (``user``'s) with their chains' summaries, read once per
        write of the user's chains."""
        if not pages:
            return pages
        turn_ids = tuple(page.turn_id for page in pages)
        chains = await self._cache.held(
            sessions,
            CHAIN,
            ("chains", turn_ids),
            lambda session: chain_store.meta_chains(session, turn_ids),
            at,
            user=user,
        )
        return with_meta_chains(pages, chains)

    async def _find(
        self,
        sessions: async_sessionmaker[AsyncSession],
        request: RecallRequest,
        at: Versions,
        state: TierState,
    ) -> _Found:
        """Rank the user's segments (``state``: theirs, with their persona) and read the
        pages of the best."""
        segments, persona = state
        query_vec = await self._query_vector(request.query, segments, persona)
        top = await self._top_segments(query_vec, request.query, segments)
        user = (request.scope.tenant, request.scope.user_id)
        pages = await self._pages(sessions, [entry.item for entry in top], user)
        return _Found(query_vec, top, pages, persona)

    async def _pages(
        self,
        sessions: async_sessionmaker[AsyncSession],
        segments: Sequence[Segment],
        user: User,
    ) -> list[_Page]:
        """Return the pages of ``user``'s ``segments``, each segment's read and decoded once
        per page filed into it.

        Held apart from the read cache, by segment and page count: a visit recall records
        moves the user's version (heat is a fold of the log) and drops their segments, but
        files no page (docs/performance.md "Session 31": reading the pages again was 3.3 ms
        of a question right after a visit, 200 segments of 5 pages).
        """
        owner = tracking.owner_key(*user)
        counts = {segment.id: segment.page_count for segment in segments}
        held = self._filed.held(owner, counts)
        missing = [segment.id for segment in segments if segment.id not in held]
        if missing:
            async with sessions() as session:
                loaded = _by_segment(await load_pages(session, missing))
            read = {segment_id: loaded.get(segment_id, []) for segment_id in missing}
            self._filed.keep(owner, read)
            held.update(read)
        return [page for segment in segments for page in held[segment.id]]

    async def read_state(
        self, sessions: async_sessionmaker[AsyncSession], scope: Scope, at: Versions
    ) -> TierState:
        """Return the user's segments and persona, read and arranged once per tier write.

        Recall begins it beside the search streams (it reads SQL and decodes, the streams
        wait on the index and the model) and hands it to ``enrich``.
        """
        self._segments.forget(at.erased)
        self._filed.forget(at.erased)
        user = (scope.tenant, scope.user_id)
        segments = await self._cache.held(
            sessions, MTM, ("segments", user), lambda s: self._segment_index(s, user), at, user=user
        )
        persona = await self._cache.held(
            sessions, PERSONA, ("persona", user), lambda s: _persona_view(s, user), at, user=user
        )
        return segments, persona

    async def _segment_index(self, session: AsyncSession, user: tuple[str, str]) -> SegmentIndex:
        states = await mtm_store.segment_states(session, *user)
        return self._segments.of(tracking.owner_key(*user), states)

    async def _query_vector(
        self, query: str, segments: SegmentIndex, persona: PersonaView
    ) -> Vector | None:
        if not query.strip() or not (segments.segments or persona.has_facts):
            return None
        return np.asarray((await self._embedder.embed([query]))[0], dtype=np.float32)

    async def _top_segments(
        self, query_vec: Vector | None, query: str, segments: SegmentIndex
    ) -> list[Ranked[Segment]]:
        if query_vec is None:
            return []
        keywords = await self._keywords.page_keywords(PageText(query=query, response=""))
        return segments.rank(query_vec, keywords, self._params.top_m)

    def _context(self, found: _Found, now: datetime) -> MemoryOsContext:
        persona, provenance = found.persona, found.persona.provenance
        by_segment = segment_provenance(found.pages)
        knowledge, agent, pages = ranked_tiers(found, self._params.top_k)
        return MemoryOsContext(
            segments=[
                segment_item(entry, heat(entry.item, now, self._params), by_segment)
                for entry in found.top
            ],
            segment_pages=[segment_page_item(entry) for entry in pages],
            knowledge=fact_items(knowledge, provenance),
            agent_traits=fact_items(agent, provenance),
            profile=persona.profile,
            traits=persona.traits,
        )
