"""The MTM projection: file evicted pages into topic segments, keep heat, promote, evict.

Live, on a page eviction it decides (embedding, keywords, segment, summary, promotion,
eviction), records each decision as a derived event and folds it at once; on a visit it
folds the visit and decides promotion. Its own derived events coming back through the log
are skipped live (already folded) and folded in replay, which makes no decision at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.mtm.state import (
    HELD_SEGMENTS,
    FilingTables,
    HeldSegments,
    MtmBatch,
    fold_evicted,
    fold_filed,
    fold_promoted,
    fold_summarised,
    fold_visited,
)
from memoryd.services.runtime.decisions import DecisionLog, ask
from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.held import HeldState
from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.services.runtime.sharing import interleaved
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.llm import MemoryLlm, OfflineExtractor, PageText
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import Event, PageEvicted, UserErased, derived_id
from memoryd.shared.contracts.memoryos import (
    PageFiled,
    SegmentEvicted,
    SegmentPromoted,
    SegmentSummarised,
    SegmentsVisited,
)
from memoryd.shared.domain.memoryos import MemoryOsParams, Vector, encode_vector
from memoryd.shared.domain.mtm import (
    Segment,
    SegmentChoice,
    heat,
    promotion_heat,
    segments_to_evict,
    should_promote,
)
from memoryd.shared.stores import mtm as mtm_store


def page_text(query: str, response: str) -> str:
    """Return the text a page is embedded as."""
    return f"{query}\n{response}".strip()


def filing(
    evicted: PageEvicted,
    choice: SegmentChoice,
    keywords: Sequence[str],
    vector: Vector,
    deciders: tuple[str, str],
) -> PageFiled:
    """Return the decision to file an evicted page: into the chosen segment, or a new one.

    ``deciders`` names the embedding model and the LLM (or extractor) that decided.
    """
    return PageFiled(
        event_id=derived_id(evicted.event_id, "page.filed"),
        occurred_at=evicted.occurred_at,
        scope=evicted.scope,
        cause_event_id=evicted.event_id,
        turn_id=evicted.turn_id,
        segment_id=choice.segment_id or str(derived_id(evicted.turn_id, "segment")),
        opened=choice.is_new,
        fscore=None if choice.score is None else round(choice.score, 6),
        keywords=tuple(keywords),
        vector=encode_vector(np.asarray(vector, dtype=np.float32)),
        query=evicted.query,
        response=evicted.response,
        turn_occurred_at=evicted.turn_occurred_at,
        embedder=deciders[0],
        decided_by=deciders[1],
    )


class MtmProjection:
    """Fold evicted pages into per-user topic segments (MemoryOS mid-term memory)."""

    consumer = subjects.MTM_CONSUMER
    folds: frozenset[type[Event]] = frozenset(
        {
            PageEvicted,
            PageFiled,
            SegmentSummarised,
            SegmentPromoted,
            SegmentEvicted,
            SegmentsVisited,
            UserErased,
        }
    )
    decides: frozenset[type[Event]] = frozenset(
        {PageFiled, SegmentSummarised, SegmentPromoted, SegmentEvicted}
    )
    tables = mtm_store.TABLES

    def __init__(
        self,
        embedder: Embedder,
        llm: MemoryLlm,
        decisions: DecisionLog,
        params: MemoryOsParams,
        *,
        held_segments: int = HELD_SEGMENTS,
    ) -> None:
        self._embedder = embedder
        self._llm = llm
        self._offline = OfflineExtractor()
        self._decisions = decisions
        self._params = params
        # Each user's segments as the last committed batch left them (see runtime/held.py).
        self.held: HeldSegments = HeldState(held_segments, size=len)
        # As many users' filing tables as held segments fill at MemoryOS's capacity.
        self._filing = FilingTables(held_segments // max(1, params.max_segments))

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases, then fold the rest of it (``_fold_batch``)."""
        return await fold_with_erasures(session, batch, live, self._fold_batch, self._erase_rows)

    async def _erase_rows(self, session: AsyncSession, event: UserErased) -> None:
        await erase_rows(self.tables)(session, event)
        self.held.put((event.scope.tenant, event.scope.user_id), None)
        self._filing.forget((event.scope.tenant, event.scope.user_id))

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Decide on evictions and visits (live) or fold the recorded decisions (replay)."""
        state = MtmBatch(session, self._params, self.held)
        await state.look_up_pages(
            item.event.turn_id for item in batch if isinstance(item.event, PageEvicted | PageFiled)
        )
        effects = Effects()
        vectors = await self._page_vectors(batch) if live else {}
        async for item in interleaved(batch):
            event = item.event
            if isinstance(event, SegmentsVisited):
                visited = await fold_visited(state, event)
                if live:
                    async for segment in interleaved(visited):
                        await self._maybe_promote(state, segment, event, effects)
            elif live and isinstance(event, PageEvicted):
                await self._file(state, event, vectors[event.event_id], effects)
            elif not live:
                await self._fold(state, event)
        await state.write()
        return effects

    async def warm(self, events: Sequence[AnyEvent]) -> None:
        """Embed the batch's evicted pages into the cache before the transaction."""
        evicted = [e for e in events if isinstance(e, PageEvicted)]
        if evicted:
            await self._embedder.embed([page_text(e.query, e.response) for e in evicted])

    async def _page_vectors(self, batch: Sequence[Positioned]) -> dict[object, Vector]:
        # One embedding call for the whole batch: the model is fastest on batches.
        evicted = [p.event for p in batch if isinstance(p.event, PageEvicted)]
        if not evicted:
            return {}
        rows = await self._embedder.embed([page_text(e.query, e.response) for e in evicted])
        return {event.event_id: row for event, row in zip(evicted, rows, strict=True)}

    async def _fold(self, state: MtmBatch, event: Event) -> None:
        if isinstance(event, PageFiled):
            await fold_filed(state, event)
        elif isinstance(event, SegmentSummarised):
            await fold_summarised(state, event)
        elif isinstance(event, SegmentPromoted):
            await fold_promoted(state, event)
        elif isinstance(event, SegmentEvicted):
            await fold_evicted(state, event)

    async def _file(
        self, state: MtmBatch, evicted: PageEvicted, vector: Vector, effects: Effects
    ) -> None:
        if await state.page_filed(evicted.turn_id):
            return  # a redelivered eviction: its page is in a segment already
        text = PageText(query=evicted.query, response=evicted.response)
        keywords = await ask(
            "page_keywords",
            evicted,
            lambda: self._llm.page_keywords(text),
            lambda: self._offline.page_keywords(text),
            self._decisions,
        )
        key = (evicted.scope.tenant, evicted.scope.user_id)
        user = await state.user(key)
        table = self._filing.synced(key, user.segments)
        choice = table.choose(vector, keywords, self._params.theta)
        deciders = (self._embedder.model_name, self._llm.name)
        filed = await self._decisions.record(filing(evicted, choice, keywords, vector, deciders))
        segment = await fold_filed(state, filed)
        if segment is None:
            return
        effects.notifications.append(notification("page.filed", filed, items=(filed.turn_id,)))
        segment = await self._summarise(state, segment, filed, text)
        await self._maybe_promote(state, segment, filed, effects)
        await self._evict(state, filed, effects)

    async def _summarise(
        self, state: MtmBatch, segment: Segment, filed: PageFiled, text: PageText
    ) -> Segment:
        answer = await ask(
            "summarise_segment",
            filed,
            lambda: self._llm.summarise_segment(segment.summary, [text]),
            lambda: self._offline.summarise_segment(segment.summary, [text]),
            self._decisions,
        )
        summarised = await self._decisions.record(
            SegmentSummarised(
                event_id=derived_id(filed.event_id, "segment.summarised"),
                occurred_at=filed.occurred_at,
                scope=filed.scope,
                cause_event_id=filed.event_id,
                segment_id=segment.id,
                summary=answer.summary,
                keywords=answer.keywords,
                decided_by=self._llm.name,
            )
        )
        await fold_summarised(state, summarised)
        return (await state.user((filed.scope.tenant, filed.scope.user_id))).segments[segment.id]

    async def _maybe_promote(
        self, state: MtmBatch, segment: Segment, cause: Event, effects: Effects
    ) -> None:
        now: datetime = cause.occurred_at
        if not should_promote(segment, now, self._params):
            return
        promoted = await self._decisions.record(
            SegmentPromoted(
                event_id=derived_id(cause.event_id, f"segment.promoted:{segment.id}"),
                occurred_at=now,
                scope=cause.scope,
                cause_event_id=cause.event_id,
                segment_id=segment.id,
                heat=round(promotion_heat(segment, now, self._params), 6),
                visits_at_promotion=segment.n_visit,
                pages=await state.round_pages(segment),
            )
        )
        await fold_promoted(state, promoted)
        effects.notifications.append(notification("segment.promoted", promoted))

    async def _evict(self, state: MtmBatch, filed: PageFiled, effects: Effects) -> None:
        user = await state.user((filed.scope.tenant, filed.scope.user_id))
        now = filed.occurred_at
        for segment in segments_to_evict(user.segments.values(), now, self._params):
            evicted = await self._decisions.record(
                SegmentEvicted(
                    event_id=derived_id(filed.event_id, f"segment.evicted:{segment.id}"),
                    occurred_at=now,
                    scope=filed.scope,
                    cause_event_id=filed.event_id,
                    segment_id=segment.id,
                    heat=round(heat(segment, now, self._params), 6),
                )
            )
            await fold_evicted(state, evicted)
            effects.notifications.append(notification("segment.evicted", evicted))
