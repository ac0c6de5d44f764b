"""The MemoryOS tiers end to end: real nats-server, real MiniLM, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from memoryd.services.bootstrap import Stack, build_model, build_projections
from memoryd.services.runtime.replay import replay
from memoryd.shared.adapters.sql.schema import table_checksum
from memoryd.shared.adapters.sql.tables import MEMORYOS_READ_MODELS, stm_pages
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, decode_event
from memoryd.shared.contracts.memoryos import (
    PageFiled,
    SegmentEvicted,
    SegmentPromoted,
    SegmentsVisited,
)
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, unique
from tests.fakes import CountingEmbedder

pytestmark = [pytest.mark.integration, pytest.mark.model]

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

BREAD = [
    ("How long do I knead sourdough bread dough?", "Knead sourdough bread dough ten minutes."),
    ("My sourdough bread dough did not rise.", "Sourdough bread dough rises slowly when cold."),
    ("Can I freeze sourdough bread dough?", "Yes, sourdough bread dough freezes well."),
    ("Should sourdough bread dough be sticky?", "Sourdough bread dough is a little sticky."),
    ("How hot to bake sourdough bread dough?", "Bake sourdough bread dough at 240 degrees."),
    ("How to shape sourdough bread dough?", "Shape sourdough bread dough into a tight ball."),
]
STARS = ("Which telescope shows Saturn's rings?", "A small refractor telescope shows Saturn.")
TAXES = ("When is the income tax return due?", "The income tax return is due in April.")
FILLER = ("ok thanks", "You are welcome.")


@pytest.fixture
async def tiers(make_stack: StackFactory) -> Stack:
    """Return a stack with the paper's MTM parameters whose STM keeps one page.

    So every next turn files a page; each recall appends its visit at once.
    """
    return await make_stack(changes={"stm_capacity": 1, "recall_visit_interval_seconds": 0})


@pytest.fixture
async def tiers_client(tiers: Stack) -> AsyncIterator[MemoryClient]:
    """Yield a client of the ``tiers`` stack."""
    async with await MemoryClient.connect(tiers.nats_url, tiers.settings.stream_name) as client:
        yield client


async def play(
    client: MemoryClient, scope: Scope, turns: list[tuple[str, str]], start: int = 0
) -> None:
    """Record ``turns`` a minute apart from minute ``start``; wait until all are applied."""
    for i, (query, response) in enumerate(turns, start):
        await client.record_turn(scope, query, response, occurred_at=T0 + timedelta(minutes=i))
    await client.wait_until_applied(timeout=60)


async def logged(stack: Stack, kind: type) -> list:  # type: ignore[type-arg]
    """Return every event of class ``kind`` in the log, in order."""
    info = await stack.js.stream_info(stack.settings.stream_name)
    found = []
    suffix = kind.model_fields["type"].default.replace(".", "_")
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await stack.js.get_msg(stack.settings.stream_name, seq)
        if msg.subject.endswith(suffix):
            found.append(decode_event(msg.data or b""))
    return found


def new_scope() -> Scope:
    """Return a scope no other test uses."""
    return Scope(tenant=unique("t"), user_id=unique("u"), session_id="s1")


async def test_a_page_joins_its_topic_and_a_new_topic_opens_a_segment(
    tiers: Stack, tiers_client: MemoryClient
) -> None:
    """Bread pages share one segment; the telescope page opens its own."""
    scope = new_scope()
    await play(tiers_client, scope, [*BREAD[:3], STARS, FILLER])

    filed = await logged(tiers, PageFiled)

    by_query = {event.query: event for event in filed}
    bread = {by_query[query].segment_id for query, _ in BREAD[:3]}
    assert 1 == len(bread)
    assert [True, False, False] == [by_query[q].opened for q, _ in BREAD[:3]]
    assert by_query[STARS[0]].opened
    assert bread != {by_query[STARS[0]].segment_id}


async def test_a_hot_segment_is_promoted_exactly_once(
    tiers: Stack, tiers_client: MemoryClient
) -> None:
    """Six bread pages heat their segment past tau once; visits raise its heat."""
    scope = new_scope()
    await play(tiers_client, scope, [*BREAD[:3], FILLER])
    first = await tiers_client.recall(scope, "sourdough bread dough")
    await tiers_client.wait_until_applied(timeout=60)  # the visit is an event the MTM folds
    second = await tiers_client.recall(scope, "sourdough bread dough")
    await tiers_client.wait_until_applied(timeout=60)
    await play(tiers_client, scope, [*BREAD[3:], FILLER], start=10)

    promoted = await logged(tiers, SegmentPromoted)
    visits = await logged(tiers, SegmentsVisited)

    assert first.memoryos.segments[0].heat < second.memoryos.segments[0].heat
    assert 3 == len(first.memoryos.segments[0].provenance.turn_ids)
    assert 2 == len(visits)
    assert 1 == len([p for p in promoted if p.scope.user_id == scope.user_id])
    assert 2 == promoted[0].visits_at_promotion


async def test_visits_reach_the_log_as_one_event_per_interval(make_stack: StackFactory) -> None:
    """Three recalls within the interval append one event counting three visits."""
    stack = await make_stack(changes={"stm_capacity": 1, "recall_visit_interval_seconds": 5.0})
    scope = new_scope()

    async def visits_logged() -> list[SegmentsVisited]:
        return [v for v in await logged(stack, SegmentsVisited) if v.scope.user_id == scope.user_id]

    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        await play(client, scope, [*BREAD[:3], FILLER])
        answers = [await client.recall(scope, "sourdough bread dough") for _ in range(3)]
        appended_at_once = await visits_logged()
        for _ in range(600):  # until the interval has passed and the recorder appended
            if await visits_logged():
                break
            await asyncio.sleep(0.1)
        await client.wait_until_applied(timeout=60)
        after = await client.recall(scope, "sourdough bread dough")

    visits = await visits_logged()
    segment = answers[0].memoryos.segments[0].segment_id
    assert [] == appended_at_once
    assert 1 == len(visits)
    assert 3 == visits[0].counts()[segment]
    assert answers[-1].memoryos.segments[0].heat < after.memoryos.segments[0].heat


async def test_the_coldest_segment_is_evicted_at_capacity(make_stack: StackFactory) -> None:
    """With room for two segments, a new topic evicts the coldest: one page, filed longest ago."""
    stack = await make_stack(changes={"stm_capacity": 1, "mtm_max_segments": 2})
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as c:
        scope = new_scope()
        await play(c, scope, [BREAD[0], BREAD[1], STARS, FILLER])
        await play(c, scope, [TAXES, FILLER], start=10)
        filed = {e.query: e.segment_id for e in await logged(stack, PageFiled)}
        evicted = await logged(stack, SegmentEvicted)
        answer = await c.recall(scope, "income tax return")

    assert filed[STARS[0]] == evicted[0].segment_id
    assert filed[BREAD[0][0]] not in {e.segment_id for e in evicted}
    assert filed[STARS[0]] not in {s.segment_id for s in answer.memoryos.segments}
    assert 2 == len(answer.memoryos.segments)


async def test_a_stated_move_becomes_a_profile_fact_recall_returns(
    make_stack: StackFactory,
) -> None:
    """The offline extractor learns "moved to Lisbon"; recall returns it for "where"."""
    stack = await make_stack(changes={"stm_capacity": 1, "mtm_promotion_tau": 0.5})
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as c:
        scope = new_scope()
        async with c.notifications(scope.tenant, scope.user_id) as queue:
            await play(c, scope, [("I moved to Lisbon last month", "Nice!"), FILLER])
            kinds = set()
            while not {"page.filed", "segment.promoted", "facts.learned"} <= kinds:
                kinds.add((await asyncio.wait_for(queue.get(), timeout=30)).kind)
        answer = await c.recall(scope, "where does the user live?")

    context = answer.memoryos
    assert [("location", "Lisbon")] == [(p.attribute, p.value) for p in context.profile]
    assert "Lisbon" in context.knowledge[0].text
    assert 1 == len(context.knowledge[0].provenance.turn_ids)
    assert ("s1",) == context.knowledge[0].provenance.session_ids
    assert "location: Lisbon" in answer.context


async def test_replay_rebuilds_every_tier_without_a_model(
    tiers: Stack, tiers_client: MemoryClient
) -> None:
    """Replaying the log with ports that refuse every call rebuilds identical tiers."""
    scope = new_scope()
    await play(tiers_client, scope, [("I moved to Lisbon last month", "Nice!"), *BREAD, STARS])
    await tiers_client.recall(scope, "sourdough bread dough")
    await play(tiers_client, scope, [TAXES, FILLER], start=20)
    tables = (stm_pages, *MEMORYOS_READ_MODELS)
    before = {t.name: await table_checksum(tiers.engine, t) for t in tables}

    await replay(
        tiers.js,
        tiers.settings.stream_name,
        tiers.engine,
        tiers.sessions,
        build_projections(tiers.settings, ("stm", "chain", "mtm", "persona")),
    )

    after = {t.name: await table_checksum(tiers.engine, t) for t in tables}
    assert before == after
    assert 0 < len(await logged(tiers, SegmentPromoted))


async def test_recalled_pages_carry_their_meta_chain(
    tiers: Stack, tiers_client: MemoryClient
) -> None:
    """Each STM page comes back with the summary of its chain."""
    scope = new_scope()
    await play(tiers_client, scope, [BREAD[0]])

    answer = await tiers_client.recall(scope)

    assert "knead" in answer.pages[0].meta_chain.lower()


async def test_a_pasted_multi_line_query_is_embedded_once(make_stack: StackFactory) -> None:
    """Recall's dense stream and its tiers share the query's vector, however it is spaced.

    The dense stream used to re-space the query and the tiers not, so a pasted page was two
    texts to the query cache: two model calls of up to 256 tokens (~60 ms each here).
    """
    model = CountingEmbedder(build_model(Settings(), "queries"))
    stack = await make_stack(changes={"stm_capacity": 1}, embedder=model)
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as c:
        scope = new_scope()
        await play(c, scope, [*BREAD[:3], STARS])
        before = model.texts
        answer = await c.recall(scope, "Sourdough  bread\n\ndough:\n  how long to knead?")
    assert answer.memoryos.segments  # the tiers ranked segments by the query's vector
    assert 1 == model.texts - before
