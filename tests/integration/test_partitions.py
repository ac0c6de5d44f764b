"""A log partitioned by user: the same memory as one partition, each user's order kept.

With MEMORYD_PARTITIONS N the stream files each event under its user's partition and every
projection runs a consumer per partition. Fed the same events, a partitioned memoryd holds the
same pages and memories as an unpartitioned one; replay and verify work per partition.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.bootstrap import Stack
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import read_dead_letters
from memoryd.shared.adapters.nats_log import PartitionsChanged, ensure_streams
from memoryd.shared.adapters.sql.schema import read_model_checksums
from memoryd.shared.adapters.sql.tables import memories, stm_pages
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import MemoryForgotten, MemoryRemembered, Scope, TurnRecorded
from memoryd.shared.contracts.events import Event
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
PARTITIONS = 4


def conversation(tenant: str, users: int = 6, turns: int = 10) -> list[Event]:
    """Return interleaved turns and memories of several users (fixed ids: replayable)."""
    scopes = [Scope(tenant=tenant, user_id=f"user-{n}", session_id="s1") for n in range(users)]
    events: list[Event] = []
    for turn in range(turns):
        for n, scope in enumerate(scopes):
            at = T0 + timedelta(minutes=turn, seconds=n)
            events.append(
                TurnRecorded(
                    occurred_at=at, scope=scope, query=f"day {turn}: user {n} walked", response="ok"
                )
            )
            if turn == 3:
                events.append(
                    MemoryRemembered(
                        occurred_at=at, scope=scope, key="diet", content=f"user {n} eats greens"
                    )
                )
            if turn == 6 and n % 2:
                events.append(MemoryForgotten(occurred_at=at, scope=scope, key="diet"))
    return events


async def user_state(sessions: async_sessionmaker[AsyncSession], tenant: str) -> dict[str, object]:
    """Return each user's STM pages (turn ids, in order) and memories (id, content)."""
    async with sessions() as session:
        pages = await session.execute(
            select(stm_pages.c.user_id, stm_pages.c.turn_id)
            .where(stm_pages.c.tenant == tenant)
            .order_by(stm_pages.c.user_id, stm_pages.c.occurred_at)
        )
        held = await session.execute(
            select(memories.c.user_id, memories.c.memory_id, memories.c.content)
            .where(memories.c.tenant == tenant)
            .order_by(memories.c.user_id, memories.c.memory_id)
        )
        state: dict[str, object] = {}
        for user, turn in pages:
            state.setdefault(f"{user}:pages", []).append(str(turn))  # type: ignore[attr-defined]
        for user, memory, content in held:
            state.setdefault(f"{user}:memories", []).append((str(memory), content))  # type: ignore[attr-defined]
    return state


async def fed(stack: Stack, events: list[Event]) -> None:
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        await client.publish_many(events)
        running = dict.fromkeys(subjects.base_consumer(c) for c in stack.runners)
        await client.wait_until_applied(timeout=120, consumers=list(running))


async def test_the_partition_is_the_one_nats_server_files_an_event_under(
    make_stack: StackFactory,
) -> None:
    """memoryd's partition() agrees with the server's transform, for many users."""
    stack = await make_stack(changes={"partitions": 7}, components=("memories",))
    tenant = unique("t")
    scopes = [Scope(tenant=tenant, user_id=f"u{n}-{uuid.uuid4().hex[: n + 1]}") for n in range(40)]
    async with await MemoryClient.connect(stack.nats_url) as client:
        for scope in scopes:
            await client.remember(scope, "x", key="k")
    for scope in scopes:
        stored = await stack.js.get_last_msg(
            stack.settings.stream_name, subjects.user_events_filter(scope.tenant, scope.user_id)
        )
        assert subjects.partition(scope.tenant, scope.user_id, 7) == subjects.partition_of(
            stored.subject or ""
        )


async def test_a_partitioned_log_holds_what_one_partition_holds(
    make_stack: StackFactory,
) -> None:
    """Interleaved users over four partitions: every user's pages and memories equal those of
    an unpartitioned memoryd fed the same events; verify finds the live state is the log's."""
    tenant = unique("t")
    events = conversation(tenant)
    single = await make_stack(components=("stm", "memories"))
    await fed(single, events)
    expected = await user_state(single.sessions, tenant)
    await single.stop()

    partitioned = await make_stack(
        changes={"partitions": PARTITIONS}, components=("stm", "memories")
    )
    await fed(partitioned, events)
    found = await user_state(partitioned.sessions, tenant)
    consumers = sorted(partitioned.runners)
    report = await partitioned.verify()

    assert expected == found
    assert 6 == len([key for key in found if key.endswith(":pages")])
    assert [
        subjects.GATE_CONSUMER,
        *[f"{subjects.MEMORIES_CONSUMER}-p{p}" for p in range(PARTITIONS)],
        *[f"{subjects.STM_CONSUMER}-p{p}" for p in range(PARTITIONS)],
    ] == consumers
    assert report.equal, [line for line in report.lines() if line.startswith("DIFF")]


async def test_replay_of_a_partitioned_log_rebuilds_the_same_read_models(
    make_stack: StackFactory,
) -> None:
    """Each partition replays to its own position; the read models come back identical."""
    tenant = unique("t")
    stack = await make_stack(changes={"partitions": PARTITIONS}, components=("stm", "memories"))
    await fed(stack, conversation(tenant))
    before = await read_model_checksums(stack.engine)
    await stack.stop_workers()

    report = await stack.replay(("stm", "memories"))

    assert {table: before[table] for table in report.checksums} == report.checksums
    assert {"stm_pages", "memories"} <= set(report.checksums)
    assert {f"{subjects.STM_CONSUMER}-p{p}" for p in range(PARTITIONS)} <= set(report.targets)


async def test_a_user_waits_only_for_the_partition_that_holds_it(
    make_stack: StackFactory,
) -> None:
    """wait_until_applied(scope=...) follows the user's partition; recall then finds it."""
    stack = await make_stack(changes={"partitions": PARTITIONS})
    scope = Scope(tenant=unique("t"), user_id="alice", session_id="s1")
    async with await MemoryClient.connect(stack.nats_url) as client:
        turn = await client.record_turn(scope, "I adopted a greyhound called Pip", "Lovely!")
        await client.wait_until_applied(timeout=60, scope=scope)
        answer = await client.recall(scope, "greyhound")

    assert turn in {page.turn_id for page in answer.pages}


async def test_an_event_filed_under_another_partition_is_dead_lettered(
    make_stack: StackFactory,
) -> None:
    """A publisher that names a partition itself cannot split a user's order: refused."""
    stack = await make_stack(changes={"partitions": PARTITIONS}, components=("stm",))
    scope = Scope(tenant=unique("t"), user_id="alice")
    turn = TurnRecorded(occurred_at=T0, scope=scope, query="hello", response="hi")
    wrong = (subjects.partition(scope.tenant, scope.user_id, PARTITIONS) + 1) % PARTITIONS
    subject = f"{subjects.event_subject(scope, turn.type)}.{wrong}"
    await stack.js.publish(subject, json.dumps(turn.model_dump(mode="json")).encode())
    async with await MemoryClient.connect(stack.nats_url) as client:
        await client.wait_until_applied(timeout=60, consumers=[subjects.STM_CONSUMER])

    letters = await read_dead_letters(stack.js, stack.settings.dead_letter_stream)
    assert [f"{subjects.STM_CONSUMER}-p{wrong}"] == [letter.consumer for letter in letters]
    assert "the user's partition is" in letters[0].reason


async def test_a_log_made_with_other_partitions_is_refused(stack: Stack) -> None:
    """The partitions are fixed when the stream is made: a user's events never move."""
    changed = stack.settings.model_copy(update={"partitions": PARTITIONS})
    with pytest.raises(PartitionsChanged, match="made with 1 partition"):
        await ensure_streams(stack.js, changed)
