"""Recall reads a user's segments again after their write, decoding only what the write
changed; an erasure takes the user's decoded segments out of recall's memory.

Real parts: the MTM fold and ``apply_once`` on SQLite, recall's tiers and version feed; the
query is embedded by a hash (the ranking is not what is tested: every segment is shown).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.mtm.projection import MtmProjection
from memoryd.services.recall.cache import ReadCache, VersionFeed
from memoryd.services.recall.tiers import TierRecall
from memoryd.services.runtime.decisions import NoDecisions
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.events import Event, UserErased
from memoryd.shared.contracts.memoryos import PageFiled, SegmentsVisited
from memoryd.shared.contracts.recall import RecallRequest, RecallResponse
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from tests.events import page_filed
from tests.fakes import HashEmbedder

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def scope(user: str) -> Scope:
    return Scope(tenant="acme", user_id=user, session_id="s1")


def filed(n: int, segment: str, user: str = "alice") -> PageFiled:
    """Return the n-th page, filed into ``segment`` (opening it for the first three)."""
    return page_filed(n, user=user, segment=f"{segment}-{user}", opened=n <= 3, dimension=32)


class Stack:
    """The MTM worker writing, and recall's tiers reading what it wrote."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions
        self.worker = MtmProjection(NoDecisions(), NoDecisions(), NoDecisions(), DEFAULT_PARAMS)
        self.cache = ReadCache()
        self.tiers = TierRecall(HashEmbedder(32), DEFAULT_PARAMS, self.cache)
        self.feed = VersionFeed()
        self.sequence = 0

    async def fold(self, *events: Event) -> None:
        """Apply ``events`` as the log's next sequences."""
        batch = []
        for event in events:
            self.sequence += 1
            batch.append(Positioned(event, self.sequence))  # type: ignore[arg-type]
        await apply_once(self.sessions, self.worker, batch, None)

    async def pages_by_segment(self, user: str = "alice", query: str = "bread") -> dict[str, int]:
        """Recall ``user``'s tiers; return each segment shown and its page count."""
        request = RecallRequest(scope=scope(user), query=query)
        empty = RecallResponse(pages=[], memories=[], context="", tokens=0)
        at = await self.feed.read(self.sessions)
        self.cache.settle(at)  # as the recall service does
        answer, _ = await self.tiers.enrich(self.sessions, request, empty, T0, at)
        return {item.segment_id: item.page_count for item in answer.memoryos.segments}


async def test_a_write_to_one_segment_decodes_that_segment_again_only(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    stack = Stack(sessions)
    await stack.fold(filed(1, "a"), filed(2, "b"), filed(3, "c"))
    before = await stack.pages_by_segment()
    decoded_before = stack.tiers.segments_decoded

    await stack.fold(filed(4, "b"))
    after = await stack.pages_by_segment()

    assert {"a-alice": 1, "b-alice": 1, "c-alice": 1} == before
    assert {"a-alice": 1, "b-alice": 2, "c-alice": 1} == after
    assert (3, 4) == (decoded_before, stack.tiers.segments_decoded)


async def test_an_erased_users_decoded_segments_leave_with_the_next_recall(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Alice is not asked for again: her segments still leave recall's memory."""
    stack = Stack(sessions)
    await stack.fold(filed(1, "a"), filed(2, "b"), filed(3, "a", user="bob"))
    await stack.pages_by_segment("alice")
    await stack.pages_by_segment("bob")
    held = stack.tiers.segments_held

    await stack.fold(UserErased(occurred_at=T0, scope=Scope(tenant="acme", user_id="alice")))
    bobs = await stack.pages_by_segment("bob")

    assert (3, 1) == (held, stack.tiers.segments_held)
    assert {"a-bob": 1} == bobs
    assert 1 == stack.tiers.pages_held  # bob's one page; alice's two left with her


async def test_the_entries_a_user_holds_do_not_grow_with_the_queries_asked(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Queries reaching other segments add their pages to the user's one entry: with an
    entry per segment, 100 users asking two queries each pushed one another out of 1,000."""
    stack = Stack(sessions)
    await stack.fold(*(filed(n, f"s{n}") for n in range(1, 10)))
    first = await stack.pages_by_segment(query="bread")
    held = len(stack.cache)
    reached = set(first)
    for query in ("rye", "spelt", "sourdough", "barley", "oats"):
        reached |= set(await stack.pages_by_segment(query=query))

    assert 5 == len(first)
    assert len(reached) > len(first)  # the queries reached other segments, with their pages
    assert 0 < held == len(stack.cache)


async def test_an_erased_users_tiers_leave_the_cache_recall_was_given(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The tiers keep what they read in the cache recall settles, even one given empty: an
    erased user's segments, persona and pages leave it with the next recall of anyone."""
    stack = Stack(sessions)
    await stack.fold(filed(1, "a"), filed(2, "b"), filed(3, "a", user="bob"))
    await stack.pages_by_segment("bob")
    bobs = len(stack.cache)
    await stack.pages_by_segment("alice")
    both = len(stack.cache)

    await stack.fold(UserErased(occurred_at=T0, scope=Scope(tenant="acme", user_id="alice")))
    await stack.pages_by_segment("bob")

    assert 0 < bobs < both
    assert bobs == len(stack.cache)


async def test_a_visit_reads_no_pages_again_and_a_filed_page_reads_its_segment_again(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A visit recall records moves the user's version (their segments' heat) but files no
    page: the pages held stay. A page filed into a segment reads that segment's pages again."""
    stack = Stack(sessions)
    await stack.fold(filed(1, "a"), filed(2, "b"), filed(3, "c"))

    async def shown() -> set[str]:
        request = RecallRequest(scope=scope("alice"), query="bread")
        empty = RecallResponse(pages=[], memories=[], context="", tokens=0)
        at = await stack.feed.read(stack.sessions)
        stack.cache.settle(at)
        answer, _ = await stack.tiers.enrich(stack.sessions, request, empty, T0, at)
        return {page.query for page in answer.memoryos.segment_pages}

    first = await shown()
    read_first = stack.tiers.pages_read
    segments = ("a-alice", "b-alice", "c-alice")
    await stack.fold(SegmentsVisited(occurred_at=T0, scope=scope("alice"), segment_ids=segments))
    after_visit = await shown()
    read_after_visit = stack.tiers.pages_read
    await stack.fold(filed(4, "b"))
    after_filing = await shown()

    assert {"q1", "q2", "q3"} == first == after_visit
    assert (3, 3) == (read_first, read_after_visit)
    assert {"q1", "q2", "q3", "q4"} == after_filing
    assert 4 == stack.tiers.pages_read  # b's pages, read again


async def test_after_a_visit_recall_shows_the_visited_segments_new_heat(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A visit changes no segment's vector or keywords (recall keeps the ranking's arrays), but
    the segments shown carry the heat the visit gave them."""
    stack = Stack(sessions)
    await stack.fold(filed(1, "a"), filed(2, "b"), filed(3, "c"))

    async def heats() -> dict[str, float]:
        request = RecallRequest(scope=scope("alice"), query="bread")
        empty = RecallResponse(pages=[], memories=[], context="", tokens=0)
        at = await stack.feed.read(stack.sessions)
        stack.cache.settle(at)
        answer, _ = await stack.tiers.enrich(stack.sessions, request, empty, T0, at)
        return {item.segment_id: item.heat for item in answer.memoryos.segments}

    before = await heats()
    visited = SegmentsVisited(occurred_at=T0, scope=scope("alice"), segment_ids=("b-alice",))
    await stack.fold(visited)
    after = await heats()

    assert before.keys() == after.keys() == {"a-alice", "b-alice", "c-alice"}
    assert after["b-alice"] == round(before["b-alice"] + DEFAULT_PARAMS.alpha, 6)
    assert (after["a-alice"], after["c-alice"]) == (before["a-alice"], before["c-alice"])
    assert 4 == stack.tiers.segments_decoded  # three, then the visited one again
