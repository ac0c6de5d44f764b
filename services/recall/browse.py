"""Answer browse requests: everything memoryd holds of one user, read-only (the memory browser).

The read models are read in one session, then arranged by pure functions: segments hottest
first with their pages, the persona's items with their provenance, memories newest first, the
graph's entities by mentions and its relations (ended ones too) newest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.rpc import Code, reply
from memoryd.services.recall.tiers import (
    persona_sources,
    profile_items,
    trait_items,
    with_meta_chains,
)
from memoryd.shared.contracts.browse import (
    BrowsedSegment,
    BrowseError,
    BrowseRequest,
    GraphEntityView,
    GraphRelationView,
    LearnedItem,
    SegmentPage,
    UserMemory,
)
from memoryd.shared.contracts.memories import StoredMemory
from memoryd.shared.contracts.recall import Provenance
from memoryd.shared.contracts.scope import SearchScope
from memoryd.shared.domain import lpm
from memoryd.shared.domain.memoryos import MemoryOsParams
from memoryd.shared.domain.mtm import Segment, heat
from memoryd.shared.stores import chain as chain_store
from memoryd.shared.stores import graph as graph_store
from memoryd.shared.stores import memories as memories_store
from memoryd.shared.stores import mtm as mtm_store
from memoryd.shared.stores import stm as stm_store
from memoryd.shared.stores.persona import Persona, load_persona, load_provenance

Row = Mapping[str, Any]


def browsed_segments(
    segments: Sequence[Segment],
    pages: Sequence[Row],
    now: datetime,
    params: MemoryOsParams,
    limit: int,
) -> list[BrowsedSegment]:
    """Return the segments hottest first, each with its newest ``limit`` pages."""
    by_segment: dict[str, list[Row]] = {}
    for row in sorted(pages, key=lambda r: (r["occurred_at"], str(r["turn_id"])), reverse=True):
        by_segment.setdefault(str(row["segment_id"]), []).append(row)
    hottest = sorted(segments, key=lambda s: (-heat(s, now, params), s.id))[:limit]
    return [
        BrowsedSegment(
            segment_id=segment.id,
            summary=segment.summary,
            keywords=segment.keywords,
            heat=round(heat(segment, now, params), 6),
            visits=segment.n_visit,
            interactions=segment.l_interaction,
            promotions=segment.promoted_count,
            page_count=segment.page_count,
            created_at=segment.created_at,
            last_visit_at=segment.last_visit_at,
            pages=[SegmentPage.model_validate(row) for row in by_segment.get(segment.id, [])][
                :limit
            ],
        )
        for segment in hottest
    ]


def learned_items(
    facts: Sequence[lpm.Fact], provenance: Mapping[str, Provenance]
) -> list[LearnedItem]:
    """Return the persona's facts (or agent traits) newest first, with their provenance."""
    return [
        LearnedItem(
            text=fact.text, learned_at=fact.at, provenance=provenance.get(fact.source, Provenance())
        )
        for fact in reversed(facts)
    ]


def graph_views(
    nodes: Sequence[Row], edges: Sequence[Row]
) -> tuple[list[GraphEntityView], list[GraphRelationView]]:
    """Return the graph's entities and relations, relations named by their entities' names."""
    names = {row["name_key"]: row["name"] for row in nodes}
    entities = [GraphEntityView.model_validate(row) for row in nodes]
    relations = [
        GraphRelationView(
            source=names.get(row["source_key"], row["source_key"]),
            relation=row["relation"],
            target=names.get(row["target_key"], row["target_key"]),
            valid_at=row["valid_at"],
            invalid_at=row["invalid_at"],
            item_id=row["item_id"],
        )
        for row in edges
    ]
    return entities, relations


def newest_memories(rows: Sequence[Row], limit: int) -> list[StoredMemory]:
    """Return the memories most recently changed first (then by id), at most ``limit``."""
    ordered = sorted(rows, key=lambda r: str(r["memory_id"]))
    ordered.sort(key=lambda r: r["updated_at"], reverse=True)
    return [StoredMemory.model_validate(row) for row in ordered[:limit]]


def _error(code: Code, message: str) -> BrowseError:
    return BrowseError(code=code, message=message)


@dataclass(frozen=True)
class Held:
    """What the read models hold of one user, as read."""

    pages: list[Any]
    segments: list[Segment]
    segment_pages: list[dict[str, Any]]
    persona: Persona
    provenance: dict[str, Provenance]
    memories: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]


@dataclass(frozen=True)
class MemoryBrowser:
    """Answer browse requests from the read models (the recall service's readers)."""

    sessions: async_sessionmaker[AsyncSession]
    params: MemoryOsParams

    async def handle(self, subject: str, body: bytes) -> bytes:
        """Decode a request received on ``subject``, answer it, and encode the reply."""
        return await reply(subject, body, BrowseRequest, self.answer, _error)

    async def answer(self, request: BrowseRequest, now: datetime) -> UserMemory:
        """Read what the user holds and arrange it for the browser."""
        async with self.sessions() as session:
            held = await self._read(session, request)
        entities, relations = graph_views(held.nodes, held.edges)
        memories = memories_store.unexpired(held.memories, now)
        persona, provenance = held.persona, held.provenance
        return UserMemory(
            tenant=request.scope.tenant,
            user_id=request.scope.user_id,
            read_at=now,
            pages=held.pages,
            segments=browsed_segments(
                held.segments, held.segment_pages, now, self.params, request.limit
            ),
            profile=profile_items(persona.profile, provenance),
            traits=trait_items(persona.traits, provenance),
            knowledge=learned_items(persona.knowledge.facts, provenance),
            agent_traits=learned_items(persona.agent_traits.facts, provenance),
            memories=newest_memories(memories, request.limit),
            memory_count=len(memories),
            entities=entities,
            relations=relations,
        )

    async def _read(self, session: AsyncSession, request: BrowseRequest) -> Held:
        scope, limit = request.scope, request.limit
        user = (scope.tenant, scope.user_id)
        pages = await stm_store.conversation_pages(session, scope, SearchScope.USER)
        chains = await chain_store.meta_chains(session, [page.turn_id for page in pages])
        segments = await mtm_store.load_segments(session, *user)
        persona = await load_persona(session, user)
        nodes, edges = await graph_store.user_graph(session, *user, limit)
        return Held(
            pages=with_meta_chains(pages, chains),
            segments=segments,
            segment_pages=await mtm_store.segment_pages(session, [s.id for s in segments]),
            persona=persona,
            provenance=await load_provenance(session, persona_sources(persona)),
            memories=await memories_store.in_scope(session, scope, SearchScope.USER),
            nodes=nodes,
            edges=edges,
        )
