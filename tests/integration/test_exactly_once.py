"""Exactly-once effects under awkward delivery: partial replay, reused ids, late first messages.

Each test ends with `Stack.verify()`: the live read models and index equal a fresh fold of the
log, so nothing was lost, doubled or left behind.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import nats
import pytest
from sqlalchemy import delete, select

from memoryd.services.bootstrap import Stack, build_projections
from memoryd.services.runtime.consumer import consumer_config
from memoryd.services.runtime.decisions import JetStreamDecisionLog
from memoryd.services.runtime.projection import Positioned, apply_once, consumer_filters
from memoryd.services.runtime.replay import replay
from memoryd.services.stm.chain import chained as chain_decision
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import read_dead_letters
from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.nats_log import EventPublisher, ensure_streams
from memoryd.shared.adapters.sql.schema import read_model_checksums
from memoryd.shared.adapters.sql.tables import memories, stm_chain, stm_pages, tracking
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, TurnRecorded, encode_event
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, _delete_streams, consumers_reading, unique

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def new_scope() -> Scope:
    return Scope(tenant=unique("t"), user_id=unique("u"), session_id="s1")


async def converse(client: MemoryClient, scope: Scope, count: int, start: int = 0) -> None:
    """Record ``count`` turns about distinct topics, one minute apart."""
    for i in range(start, start + count):
        await client.record_turn(
            scope,
            f"Tell me about topic number {i}: I visited Lisbon in {2000 + i}",
            f"Answer {i}",
            occurred_at=T0 + timedelta(minutes=i),
        )


async def delivered_elsewhere(settings: Settings, *, acked: bool) -> TurnRecorded:
    """Publish a first turn on a fresh log and have each projection's consumer deliver it
    outside any worker: acknowledged (the consumer's state is past it) or left unacked."""
    await _delete_streams(settings.nats_url or "", settings)
    nc = await nats.connect(settings.nats_url or "")
    js = nc.jetstream()
    await ensure_streams(js, settings)
    turn = TurnRecorded(
        occurred_at=T0, scope=new_scope(), query="I adopted a greyhound", response="ok"
    )
    await EventPublisher(js, settings.stream_name).publish(turn)
    for consumer in subjects.PROJECTION_CONSUMERS:
        elsewhere = await js.pull_subscribe(
            subjects.ALL_EVENTS,
            durable=consumer,
            stream=settings.stream_name,
            config=consumer_config(consumer, settings),
        )
        (msg,) = await elsewhere.fetch(1, timeout=5)
        if acked:
            await msg.ack_sync()
    await nc.close()
    return turn


async def positions(stack: Stack) -> dict[str, int]:
    async with stack.engine.connect() as conn:
        rows = await conn.execute(select(tracking.c.consumer, tracking.c.position))
        return {row.consumer: row.position for row in rows}


@pytest.mark.model
@pytest.mark.parametrize(
    "replayed",
    [("stm",), ("memories",), ("stm", "chain", "mtm", "persona"), ("indexer", "graph")],
)
async def test_a_partial_replay_leaves_every_other_read_model_unchanged(
    stack: Stack, client: MemoryClient, replayed: tuple[str, ...]
) -> None:
    """Replaying a subset rebuilds its tables; every other table and position stays as it was."""
    scope = new_scope()
    await converse(client, scope, 9)
    await client.remember(scope, "Alice is vegetarian", key="diet")
    await client.wait_until_applied()
    before, positions_before = await read_model_checksums(stack.engine), await positions(stack)
    await stack.stop_workers()

    await replay(
        stack.js,
        stack.settings.stream_name,
        stack.engine,
        stack.sessions,
        build_projections(stack.settings, replayed, await stack.retrieval_resources()),  # type: ignore[arg-type]
    )

    assert before == await read_model_checksums(stack.engine)
    assert positions_before == await positions(stack)
    assert (await stack.verify()).equal


@pytest.mark.model
async def test_an_event_id_reused_for_other_content_is_refused_by_every_projection(
    stack: Stack, client: MemoryClient
) -> None:
    """The first event with an id wins everywhere; a later one is dead-lettered with the reason
    by every projection that folds turns (the others never read it: it only moves them on)."""
    scope = new_scope()
    first = TurnRecorded(occurred_at=T0, scope=scope, query="I live in Lisbon", response="ok")
    impostor = first.model_copy(update={"query": "I live in Madrid"})
    await client.publish(first)
    # A raw publish under another Msg-Id: the stream's de-duplication cannot catch it.
    await stack.js.publish(
        subjects.event_subject(scope, first.type),
        encode_event(impostor),
        headers={"Nats-Msg-Id": "a-raw-publisher"},
    )
    await client.record_turn(scope, "still here?", "yes", occurred_at=T0 + timedelta(minutes=1))
    await client.wait_until_applied()

    letters = await read_dead_letters(stack.js, stack.settings.dead_letter_stream)
    answer = await client.recall(scope, "where do I live?")
    await client.wait_until_applied()  # the recall's own events, before verify reads

    readers = {name for name, run in stack.runners.items() if TurnRecorded in run.projection.folds}
    assert {"memoryd-stm", "memoryd-indexer", "memoryd-graph", "memoryd-stm-chain"} == readers
    assert readers == {letter.consumer for letter in letters}
    assert {encode_event(impostor)} == {letter.data for letter in letters}
    assert all("first occurrence wins" in letter.reason for letter in letters)
    assert ["I live in Lisbon", "still here?"] == [page.query for page in answer.pages]
    assert "Madrid" not in answer.context
    report = await stack.verify()
    assert report.equal, [line for line in report.lines() if line.startswith("DIFF")]


@pytest.mark.model
async def test_a_copy_of_an_event_past_the_duplicate_window_is_skipped_quietly(
    stack: Stack, client: MemoryClient
) -> None:
    """The same event again under another Msg-Id changes nothing and parks nothing."""
    scope = new_scope()
    turn = TurnRecorded(occurred_at=T0, scope=scope, query="hello", response="hi")
    await client.publish(turn)
    await stack.js.publish(
        subjects.event_subject(scope, turn.type),
        encode_event(turn),
        headers={"Nats-Msg-Id": "a-late-copy"},
    )
    await client.wait_until_applied()

    assert 0 == (await stack.js.stream_info(stack.settings.dead_letter_stream)).state.messages
    assert ["hello"] == [page.query for page in (await client.recall(scope)).pages]
    await client.wait_until_applied()
    assert (await stack.verify()).equal


@pytest.fixture
async def late_first(
    settings: Settings, make_stack: StackFactory
) -> tuple[Stack, Scope, uuid.UUID]:
    """Yield a stack whose consumers each had the log's first message delivered and not acked.

    That is what a worker killed before its first commit leaves behind: on restart, the later
    messages are delivered at once and the first only after ack_wait.
    """
    settings = settings.model_copy(update={"ack_wait_seconds": 2.0})
    first = await delivered_elsewhere(settings, acked=False)
    # The factory starts from a clean database and the stream as it stands (created above).
    running = await make_stack(changes={"ack_wait_seconds": 2.0}, keep_streams=True)
    return running, first.scope, first.event_id


@pytest.mark.model
async def test_a_first_message_redelivered_after_later_ones_is_still_applied(
    late_first: tuple[Stack, Scope, uuid.UUID],
) -> None:
    """Every projection applies the log from its first message, whatever the delivery order."""
    stack, scope, first_id = late_first
    client = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    try:
        await converse(client, scope, 5, start=1)
        await client.wait_until_applied(timeout=60)
        async with stack.engine.connect() as conn:
            pages = (await conn.execute(select(stm_pages.c.turn_id))).scalars().all()
        retrieval = await stack.retrieval_resources()
        indexed = await retrieval.index.search_sparse(
            "greyhound", ScopeFilter(tenant=scope.tenant, user_id=scope.user_id)
        )
    finally:
        await client.close()

    assert first_id in pages
    assert any("greyhound" in hit.text for hit in indexed)
    report = await stack.verify()
    assert report.equal, [line for line in report.lines() if line.startswith("DIFF")]


@pytest.mark.model
async def test_verify_names_the_read_model_and_index_key_that_differ(
    stack: Stack, client: MemoryClient
) -> None:
    """A row or an index point lost from the live state is reported where it is missing."""
    scope = new_scope()
    await converse(client, scope, 3)
    await client.remember(scope, "Alice is vegetarian", key="diet")
    await client.wait_until_applied()
    assert (await stack.verify()).equal

    async with stack.engine.begin() as conn:
        await conn.execute(delete(memories))
    retrieval = await stack.retrieval_resources()
    memory_points = await retrieval.index.search_sparse(
        "vegetarian", ScopeFilter(tenant=scope.tenant, kinds=("memory",))
    )
    await retrieval.index.delete([hit.id for hit in memory_points])
    report = await stack.verify()

    assert ["index:memory", "memories"] == report.differences
    assert 0 == report.live["memories"].count
    assert 1 == report.fresh["memories"].count


@pytest.mark.model
async def test_a_message_a_worker_never_got_is_applied_long_before_ack_wait(
    settings: Settings, make_stack: StackFactory
) -> None:
    """A turn delivered to every consumer and lost before its worker saw it (as a fetch can
    lose one) is applied once the worker finds itself idle with it unacked, not after the
    60 s ack_wait; the late redelivery is then acked as already applied."""
    changes = {"ack_wait_seconds": 60.0, "idle_poll_seconds": 0.5}
    settings = settings.model_copy(update=changes)
    turn = await delivered_elsewhere(settings, acked=False)  # never handed on
    scope = turn.scope
    stack = await make_stack(changes=changes, keep_streams=True)
    client = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    try:
        async with asyncio.timeout(20):  # a third of ack_wait
            seen = await applied_everywhere(stack, client, scope, turn.event_id)
    finally:
        await client.close()

    assert {turn.event_id} == seen


@pytest.mark.model
async def test_a_message_the_consumer_passed_over_is_applied_by_the_next_start(
    settings: Settings, make_stack: StackFactory
) -> None:
    """A turn the consumers' state has moved past (delivered and acknowledged, never handed
    to a worker: as a consumer led from a replica still catching up passes a message over,
    its delivery sequences still consecutive) is applied once the workers start: a start's
    first batch is completed from the stream, whatever the consumer's state says."""
    passed = await delivered_elsewhere(settings, acked=True)  # no worker applied it
    scope = passed.scope
    stack = await make_stack(keep_streams=True)
    client = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    try:
        await client.record_turn(scope, "I named him Biscuit", "ok", occurred_at=T0 + timedelta(1))
        async with asyncio.timeout(30):
            seen = await applied_everywhere(stack, client, scope, passed.event_id)
    finally:
        await client.close()

    assert passed.event_id in seen
    assert not (await stack.verify()).differences


async def applied_everywhere(
    stack: Stack, client: MemoryClient, scope: Scope, turn_id: uuid.UUID
) -> set[uuid.UUID]:
    """Poll until every projection reading turns has applied sequence 1 and recall shows the
    turn's page; return the pages' turn ids then."""
    readers = consumers_reading(stack, subjects.event_subject(scope, "turn.recorded.v1"))
    while True:
        applied = await positions(stack)
        pages = {page.turn_id for page in (await client.recall(scope)).pages}
        if turn_id in pages and all(applied.get(c, 0) >= 1 for c in readers):
            return pages
        await asyncio.sleep(0.2)


@pytest.mark.model
async def test_a_decision_still_on_its_way_back_is_kept_by_verify_and_replay(
    make_stack: StackFactory,
) -> None:
    """A worker that applied a turn and recorded its decision, then stopped before the
    decision's copy came back through the log (the window is as wide as the worker's lag):
    verify finds the live state equal to the log, and a replay keeps the page's meta chain."""
    stack = await make_stack(components=())
    settings, stream = stack.settings, stack.settings.stream_name
    scope = new_scope()
    turn = TurnRecorded(occurred_at=T0, scope=scope, query="I moved to Lisbon", response="Nice!")
    await EventPublisher(stack.js, stream).publish(turn)
    retrieval = await stack.retrieval_resources()
    decisions = JetStreamDecisionLog(stack.js, stream)
    (chain,) = build_projections(settings, ("chain",), retrieval, decisions)
    config = consumer_config(chain.consumer, settings, consumer_filters(chain))
    await stack.js.add_consumer(stream, config)
    worker = await stack.js.pull_subscribe_bind(durable=chain.consumer, stream=stream)
    (msg,) = await worker.fetch(1, timeout=5)
    await apply_once(
        stack.sessions, chain, [Positioned(turn, msg.metadata.sequence.stream)], stack.publisher
    )
    await msg.ack_sync()  # the decision is in the log, after the turn: not read back yet
    await worker.unsubscribe()
    chained = await meta_chains(stack)

    report = await stack.verify()
    await replay(
        stack.js, stream, stack.engine, stack.sessions, build_projections(settings, ("chain",))
    )

    assert report.equal, [line for line in report.lines() if line.startswith("DIFF")]
    assert chained == await meta_chains(stack)
    assert "" not in chained.values()  # the decision summarised the chain


@pytest.mark.model
async def test_a_batch_folds_the_decision_the_log_kept_not_its_own(
    make_stack: StackFactory,
) -> None:
    """A trigger redelivered after its worker recorded a decision and died before its commit:
    the batch sends its decisions without waiting for each, finds the log kept another copy
    of one, and is applied again folding the log's copy (live state = the fold of the log)."""
    stack = await make_stack(components=())
    settings, stream = stack.settings, stack.settings.stream_name
    scope = new_scope()
    turn = TurnRecorded(occurred_at=T0, scope=scope, query="I moved to Lisbon", response="Nice!")
    publisher = EventPublisher(stack.js, stream)
    sequence = await publisher.publish(turn)
    kept = chain_decision(turn, False, "what the first worker decided", "an earlier worker")
    await publisher.publish(kept)
    retrieval = await stack.retrieval_resources()
    decisions = JetStreamDecisionLog(stack.js, stream)
    (chain,) = build_projections(settings, ("chain",), retrieval, decisions)

    await apply_once(stack.sessions, chain, [Positioned(turn, sequence)], stack.publisher)

    assert {turn.event_id: "what the first worker decided"} == await meta_chains(stack)


async def meta_chains(stack: Stack) -> dict[uuid.UUID, str]:
    """Return each chained page's meta chain."""
    async with stack.engine.connect() as conn:
        rows = await conn.execute(select(stm_chain.c.turn_id, stm_chain.c.meta_chain))
        return {row.turn_id: row.meta_chain for row in rows}
