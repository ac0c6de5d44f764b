"""The MTM read model of one batch: segments and pages per user, folded from derived events.

The fold functions are the only way MTM state changes, live or in replay, so the two agree.
A visit (from recall) can land in the log before or after the filing it is concurrent with;
visits therefore only add to N_visit and move the last visit forward, which commutes.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.held import HeldState
from memoryd.shared.contracts.memoryos import (
    PageFiled,
    PromotedPage,
    SegmentEvicted,
    SegmentPromoted,
    SegmentSummarised,
    SegmentsVisited,
)
from memoryd.shared.domain.memoryos import (
    MemoryOsParams,
    as_utc,
    decode_vector,
)
from memoryd.shared.domain.mtm import (
    FilingTable,
    Segment,
    file_page,
    open_segment,
    rewrite_summary,
)
from memoryd.shared.stores import mtm as store

UserKey = tuple[str, str]  # (tenant, user_id)
# Segments held between batches, all users together (3.5 KB each decoded, vector included:
# tracemalloc over 12,732 LongMemEval segments, so ~70 MB): 100 users at MemoryOS's 200
# segments each (``MEMORYD_MTM_HELD_SEGMENTS``).
HELD_SEGMENTS = 20_000
HeldSegments = HeldState[UserKey, dict[str, Segment]]


class FilingTables:
    """The users' filing tables (``FilingTable``), the most recently used ``max_users``.

    A table is synced with the segments before each choice, so one held across batches (or
    across a batch that failed) can only be refreshed, never wrong.
    """

    def __init__(self, max_users: int) -> None:
        """Keep at most ``max_users`` tables (0: build one per filing)."""
        self._max_users = max_users
        self._tables: OrderedDict[UserKey, FilingTable] = OrderedDict()

    def synced(self, key: UserKey, segments: Mapping[str, Segment]) -> FilingTable:
        """Return the user's table holding exactly ``segments``."""
        table = self._tables.pop(key, None) or FilingTable()
        table.sync(segments)
        if self._max_users > 0:
            self._tables[key] = table
            while len(self._tables) > self._max_users:
                self._tables.popitem(last=False)
        return table

    def forget(self, key: UserKey) -> None:
        """Drop the user's table (an erased user's keywords are not kept)."""
        self._tables.pop(key, None)


@dataclass
class UserSegments:
    """One user's segments as loaded, and what this batch changed."""

    segments: dict[str, Segment]
    changed: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)


@dataclass
class MtmBatch:
    """The MTM state a batch works on: loaded lazily per user, written back once."""

    session: AsyncSession
    params: MemoryOsParams
    held: HeldSegments | None = None  # the segments the last committed batch left
    users: dict[UserKey, UserSegments] = field(default_factory=dict)
    new_pages: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    # Pages read from SQL (``look_up_pages``): those found filed, and every one asked about.
    stored_pages: set[uuid.UUID] = field(default_factory=set)
    looked_up: set[uuid.UUID] = field(default_factory=set)

    async def user(self, key: UserKey) -> UserSegments:
        """Return the user's segments: held from the last batch, or loaded on first use."""
        if key not in self.users:
            held = self.held.get(key) if self.held is not None else None
            if held is None:
                loaded = await store.load_segments(self.session, *key)
                held = {segment.id: segment for segment in loaded}
            self.users[key] = UserSegments(dict(held))  # Segments are frozen: a shallow copy
        return self.users[key]

    async def look_up_pages(self, turn_ids: Iterable[uuid.UUID]) -> None:
        """Read in one query which of these pages are filed already (``page_filed`` asks
        twice per page: one query per batch instead of two per page)."""
        asked = set(turn_ids) - self.looked_up
        self.stored_pages |= await store.filed_pages(self.session, asked)
        self.looked_up |= asked

    async def page_filed(self, turn_id: uuid.UUID) -> bool:
        """Return whether the page is already in a segment (a redelivered decision)."""
        if turn_id in self.new_pages:
            return True
        await self.look_up_pages((turn_id,))
        return turn_id in self.stored_pages

    async def round_pages(self, segment: Segment, limit: int = 20) -> tuple[PromotedPage, ...]:
        """Return the segment's pages filed since its last promotion, oldest first."""
        stored = await store.round_pages(self.session, segment)
        pending = [
            row
            for row in self.new_pages.values()
            if row["segment_id"] == segment.id and row["promotion_round"] == segment.promoted_count
        ]
        pages = [*stored, *pending][-limit:]
        return tuple(
            PromotedPage(
                turn_id=row["turn_id"],
                session_id=row["session_id"],
                query=row["query"],
                response=row["response"],
            )
            for row in pages
        )

    async def write(self) -> None:
        """Write the changed segments and new pages; delete evicted segments and their pages."""
        removed = [sid for user in self.users.values() for sid in user.removed]
        rows = [
            {"segment_id": sid, "tenant": key[0], "user_id": key[1], "state": seg.to_json()}
            for key, user in self.users.items()
            for sid, seg in user.segments.items()
            if sid in user.changed
        ]
        pages = [row for row in self.new_pages.values() if row["segment_id"] not in removed]
        await store.save(self.session, rows, removed, pages)
        if self.held is not None:  # the batch is done with them: no copy (``user`` copies)
            for key, user in self.users.items():
                self.held.put(key, user.segments)


def user_of(event: PageFiled | SegmentSummarised | SegmentPromoted | SegmentEvicted) -> UserKey:
    """Return the (tenant, user) whose segments an event changes."""
    return (event.scope.tenant, event.scope.user_id)


def _later(segment: Segment, moment: datetime) -> datetime:
    return max(segment.last_visit_at, as_utc(moment))


async def fold_filed(batch: MtmBatch, event: PageFiled) -> Segment | None:
    """Add the page to its segment (opening it if new); return the segment, None if known."""
    if await batch.page_filed(event.turn_id):
        return None
    user = await batch.user(user_of(event))
    segment = filed(user.segments.get(event.segment_id), event, batch.params)
    user.segments[segment.id] = segment
    user.changed.add(segment.id)
    batch.new_pages[event.turn_id] = page_row(event, segment)
    return segment


def filed(held: Segment | None, event: PageFiled, params: MemoryOsParams) -> Segment:
    """Return the segment with the page filed: ``held``, or a new one if it holds nothing."""
    vector = decode_vector(event.vector)
    if held is None:
        return open_segment(event.segment_id, vector, event.keywords, event.occurred_at, params)
    segment = file_page(held, vector, event.keywords, event.occurred_at, params)
    return segment.model_copy(update={"last_visit_at": _later(held, event.occurred_at)})


def page_row(event: PageFiled, segment: Segment) -> dict[str, Any]:
    """Return the row of a page filed into ``segment``."""
    return {
        "turn_id": event.turn_id,
        "segment_id": segment.id,
        "tenant": event.scope.tenant,
        "user_id": event.scope.user_id,
        "agent_id": event.scope.agent_id,
        "session_id": event.scope.session_id,
        "query": event.query,
        "response": event.response,
        "occurred_at": event.turn_occurred_at,
        "keywords": list(event.keywords),
        "fscore": event.fscore,
        "vector": event.vector,
        "promotion_round": segment.promoted_count,
    }


async def fold_summarised(batch: MtmBatch, event: SegmentSummarised) -> None:
    """Replace the segment's summary and keywords."""
    user = await batch.user(user_of(event))
    segment = user.segments.get(event.segment_id)
    if segment is not None:
        user.segments[segment.id] = rewrite_summary(
            segment, event.summary, event.keywords, batch.params
        )
        user.changed.add(segment.id)


async def fold_promoted(batch: MtmBatch, event: SegmentPromoted) -> None:
    """Reset L_interaction and spend the visits counted at the decision."""
    user = await batch.user(user_of(event))
    segment = user.segments.get(event.segment_id)
    if segment is not None:
        user.segments[segment.id] = segment.model_copy(
            update={
                "l_interaction": 0,
                "promoted_count": segment.promoted_count + 1,
                "visits_at_promotion": event.visits_at_promotion,
            }
        )
        user.changed.add(segment.id)


async def fold_evicted(batch: MtmBatch, event: SegmentEvicted) -> None:
    """Drop the segment (its pages go when the batch is written)."""
    user = await batch.user(user_of(event))
    if user.segments.pop(event.segment_id, None) is not None:
        user.changed.discard(event.segment_id)
        user.removed.add(event.segment_id)


async def fold_visited(batch: MtmBatch, event: SegmentsVisited) -> list[Segment]:
    """Count the visits to each segment still held; return the visited segments."""
    user = await batch.user((event.scope.tenant, event.scope.user_id))
    visited = []
    for segment_id, count in event.counts().items():
        segment = user.segments.get(segment_id)
        if segment is None:
            continue  # evicted since recall saw it
        updated = segment.model_copy(
            update={
                "n_visit": segment.n_visit + count,
                "last_visit_at": _later(segment, event.occurred_at),
            }
        )
        user.segments[segment_id] = updated
        user.changed.add(segment_id)
        visited.append(updated)
    return visited
