"""End-to-end behaviour against a real nats-server and a real database (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from nats.js import api

from memoryd.services.bootstrap import ALL_COMPONENTS, Stack, build_projections
from memoryd.services.runtime.replay import replay
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import read_dead_letters
from memoryd.shared.adapters.sql.schema import read_model_checksums
from memoryd.shared.client import MemoryClient, RecallFailed
from memoryd.shared.contracts import (
    Category,
    PageEvicted,
    Scope,
    SearchScope,
    TurnRecorded,
    decode_event,
    derived_id,
    encode_event,
)
from memoryd.shared.contracts.notifications import notification_type
from tests.conftest import unique

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def scope_for(tenant: str | None = None, user: str | None = None, **extra: str) -> Scope:
    """Return a fresh scope (unique tenant and user unless given)."""
    return Scope(tenant=tenant or unique("t"), user_id=user or unique("u"), **extra)


async def record_turns(client: MemoryClient, scope: Scope, count: int) -> list[uuid.UUID]:
    """Record ``count`` numbered turns one minute apart; return their ids."""
    return [
        await client.record_turn(
            scope, f"question {i}", f"answer {i}", occurred_at=T0 + timedelta(minutes=i)
        )
        for i in range(count)
    ]


async def stream_events(stack: Stack, event_type: str) -> list[object]:
    """Return every event of ``event_type`` in the log, decoded."""
    js = stack.js
    info = await js.stream_info(stack.settings.stream_name)
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(stack.settings.stream_name, seq)
        if msg.subject.endswith(event_type.replace(".", "_")):
            found.append(decode_event(msg.data or b""))
    return found


async def test_eighth_turn_evicts_the_oldest_page(stack: Stack, client: MemoryClient) -> None:
    """The FIFO keeps 7 pages; the 8th turn evicts the first as a page-evicted event."""
    scope = scope_for(session_id="s1")
    turn_ids = await record_turns(client, scope, 8)
    await client.wait_until_applied()

    answer = await client.recall(scope)
    evicted = await stream_events(stack, "page.evicted.v1")

    assert [f"question {i}" for i in range(1, 8)] == [page.query for page in answer.pages]
    assert 1 == len(evicted)
    assert isinstance(evicted[0], PageEvicted)
    assert turn_ids[0] == evicted[0].turn_id
    assert derived_id(turn_ids[0], "page.evicted") == evicted[0].event_id
    assert "question 0" == evicted[0].query


async def test_a_duplicated_event_changes_nothing(stack: Stack, client: MemoryClient) -> None:
    """The same event published twice (same id) is stored and applied once."""
    scope = scope_for()
    turn = TurnRecorded(occurred_at=T0, scope=scope, query="hello", response="hi")
    first = await client.publish(turn)
    second = await client.publish(turn)
    # Beyond the duplicate window the stream cannot dedupe: publish it under another Msg-Id.
    await stack.js.publish(
        subjects.event_subject(scope, turn.type),
        encode_event(turn),
        headers={"Nats-Msg-Id": "a-late-copy"},
    )
    await client.wait_until_applied()

    answer = await client.recall(scope)

    assert first == second
    assert ["hello"] == [page.query for page in answer.pages]


async def test_a_redelivered_batch_changes_nothing(stack: Stack, client: MemoryClient) -> None:
    """Delivering already-applied messages again leaves every read model as it was."""
    scope = scope_for()
    await record_turns(client, scope, 10)
    await client.remember(scope, "likes green tea", key="tea")
    await client.wait_until_applied()
    before = await read_model_checksums(stack.engine)

    for runner in stack.runners.values():
        sub = await stack.js.pull_subscribe(
            subjects.ALL_EVENTS,
            stream=stack.settings.stream_name,
            config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
        )
        await runner.handle(await sub.fetch(100, timeout=2))
        await sub.unsubscribe()

    assert before == await read_model_checksums(stack.engine)
    assert 3 == len(await stream_events(stack, "page.evicted.v1"))


async def test_malformed_events_are_dead_lettered_and_the_worker_goes_on(
    stack: Stack, client: MemoryClient
) -> None:
    """Bad JSON and a misfiled event land in the dead-letter stream; later events still apply."""
    scope = scope_for()
    other = scope_for(tenant=scope.tenant)
    subject = subjects.event_subject(scope, "turn.recorded.v1")
    await stack.js.publish(subject, b"{not json")
    misfiled = TurnRecorded(occurred_at=T0, scope=other, query="sneaky", response="x")
    await stack.js.publish(subject, encode_event(misfiled))
    await client.record_turn(scope, "still here?", "yes")
    await client.wait_until_applied()

    letters = await read_dead_letters(stack.js, stack.settings.dead_letter_stream)
    stm_letters = [letter for letter in letters if letter.consumer == subjects.STM_CONSUMER]
    answer = await client.recall(scope)

    assert [b"{not json", encode_event(misfiled)] == [letter.data for letter in stm_letters]
    assert "invalid event" in stm_letters[0].reason
    assert "does not match" in stm_letters[1].reason
    assert ["still here?"] == [page.query for page in answer.pages]
    assert [] == (await client.recall(other)).pages


async def test_users_and_tenants_never_see_each_other(stack: Stack, client: MemoryClient) -> None:
    """Two tenants with the same user id, and two users in one tenant, stay apart."""
    alice_a = Scope(tenant=unique("acme"), user_id="alice")
    alice_b = Scope(tenant=unique("globex"), user_id="alice")
    bob_a = Scope(tenant=alice_a.tenant, user_id="bob")
    for scope in (alice_a, alice_b, bob_a):
        label = f"{scope.tenant}/{scope.user_id}"
        await client.record_turn(scope, f"secret of {label}", "ok")
        await client.remember(scope, f"secret fact of {label}", key="secret")
    await client.wait_until_applied()

    for scope in (alice_a, alice_b, bob_a):
        label = f"{scope.tenant}/{scope.user_id}"
        for search_scope in (SearchScope.AGENT, SearchScope.USER):
            answer = await client.recall(scope, "secret", search_scope=search_scope)
            assert [f"secret of {label}"] == [page.query for page in answer.pages]
            assert [f"secret fact of {label}"] == [m.content for m in answer.memories]
    tenant_wide = await client.recall(alice_a, "secret", search_scope=SearchScope.GLOBAL)
    assert {f"secret fact of {alice_a.tenant}/alice", f"secret fact of {alice_a.tenant}/bob"} == {
        m.content for m in tenant_wide.memories
    }


async def test_unknown_scope_is_empty_and_a_bad_request_is_a_clear_error(
    stack: Stack, client: MemoryClient
) -> None:
    """Recall for a scope with no data answers empty; malformed requests get an error reply."""
    empty = await client.recall(scope_for(), "anything")
    assert ([], [], "") == (empty.pages, empty.memories, empty.context)

    with pytest.raises(RecallFailed) as failure:
        await client.recall_raw("ab", b'{"scope": {"tenant": "a.b", "user_id": "u"}}')
    assert "invalid_request" == failure.value.error.code
    assert "tenant" in failure.value.error.message
    with pytest.raises(RecallFailed):
        await client.recall_raw("ab", b"not json")


async def test_forget_removes_a_memory_from_recall(stack: Stack, client: MemoryClient) -> None:
    """Forgetting by id or by key removes exactly that memory."""
    scope = scope_for()
    tea = await client.remember(scope, "Alice drinks green tea every morning")
    await client.remember(scope, "Alice drinks coffee after lunch", key="coffee")
    await client.remember(scope, "Alice drinks water at night")
    await client.wait_until_applied()
    assert 3 == len((await client.recall(scope, "what does Alice drink")).memories)

    await client.forget(scope, memory_id=tea)
    await client.forget(scope, key="coffee")
    await client.wait_until_applied()

    answer = await client.recall(scope, "what does Alice drink")
    assert ["Alice drinks water at night"] == [m.content for m in answer.memories]


async def test_remembering_a_key_again_replaces_the_memory(
    stack: Stack, client: MemoryClient
) -> None:
    """The same key in the same scope is one memory holding the latest content."""
    scope = scope_for()
    first = await client.remember(scope, "lives in Porto", key="home")
    second = await client.remember(scope, "lives in Lisbon", key="home")
    await client.wait_until_applied()

    answer = await client.recall(scope, "lives")

    assert first == second
    assert ["lives in Lisbon"] == [m.content for m in answer.memories]


async def test_session_end_clears_only_its_conversation_memories(
    stack: Stack, client: MemoryClient
) -> None:
    """Ending a session drops its conversation-category memories and keeps the rest."""
    scope = scope_for(session_id="s1")
    await client.remember(scope, "draft itinerary notes", category=Category.CONVERSATION)
    await client.remember(scope, "allergic to peanuts", category=Category.CORE)
    await client.end_session(scope)
    await client.wait_until_applied()

    answer = await client.recall(scope)

    assert ["allergic to peanuts"] == [m.content for m in answer.memories]


async def test_subscribers_are_notified_of_changes(stack: Stack, client: MemoryClient) -> None:
    """A subscriber to a user's notifications sees pages added, memories stored, and each
    turn and memory becoming recallable, each as its kind's contract."""
    scope = scope_for()
    async with client.notifications(scope.tenant, scope.user_id) as queue:
        turn_id = await client.record_turn(scope, "hi", "hello")
        memory_id = await client.remember(scope, "likes jazz")
        notes = [await asyncio.wait_for(queue.get(), timeout=10) for _ in range(4)]
    kinds = {note.kind: note for note in notes if note.kind != "recallable"}
    recallable = [note for note in notes if note.kind == "recallable"]
    assert {"page.added", "memory.stored"} == set(kinds)
    assert {notification_type(note.kind) for note in notes} == {type(note) for note in notes}
    assert (memory_id,) == kinds["memory.stored"].item_ids
    assert [turn_id] == [note.event_id for note in recallable if not note.item_ids]
    assert [(memory_id,)] == [note.item_ids for note in recallable if note.item_ids]


async def test_a_durable_subscriber_restarted_gets_the_missed_notifications_of_the_workers(
    stack: Stack, client: MemoryClient
) -> None:
    """Stopped after the first turns' notifications and restarted after more turns, a durable
    subscriber gets the rest of what the workers published, each once, in the stream's order,
    and its page.added notifications follow the user's turns."""
    scope = scope_for()
    notify_stream = stack.settings.notify_stream_name
    first = await record_turns(client, scope, 3)
    await client.wait_until_applied()
    stored = await stored_notifications(stack, scope)
    async with client.notifications(scope.tenant, scope.user_id, durable="app", start="all") as u:
        before = [await asyncio.wait_for(u.get(), 10) for _ in range(stored)]
    later = await record_turns(client, scope, 3)
    await client.wait_until_applied()
    missed = await stored_notifications(stack, scope) - stored

    async with client.notifications(scope.tenant, scope.user_id, durable="app") as u:
        after = [await asyncio.wait_for(u.get(), 10) for _ in range(missed)]
    info = await stack.js.consumer_info(notify_stream, "app")

    assert 0 < missed
    assert (0, 0) == (info.num_pending, info.num_ack_pending)  # none left, none doubled
    pages = [note.event_id for note in before + after if note.kind == "page.added"]
    assert first + later == pages
    assert len({note.model_dump_json() for note in before + after}) == len(before + after)


async def stored_notifications(stack: Stack, scope: Scope) -> int:
    """Return how many notifications of ``scope``'s user the notification stream holds."""
    info = await stack.js.stream_info(
        stack.settings.notify_stream_name,
        subjects_filter=subjects.notify_filter(scope.tenant, scope.user_id),
    )
    return sum((info.state.subjects or {}).values())


async def test_replay_rebuilds_identical_read_models(stack: Stack, client: MemoryClient) -> None:
    """Dropping the read models and replaying the log gives the same checksums."""
    for _ in range(3):
        scope = scope_for(session_id="s1")
        await record_turns(client, scope, 12)
        await client.remember(scope, "likes hiking", key="hobby")
        await client.remember(scope, "today: dentist", category=Category.DAILY)
        await client.remember(scope, "draft", category=Category.CONVERSATION)
        await client.forget(scope, key="hobby")
        await client.end_session(scope)
    await client.wait_until_applied()
    before = await read_model_checksums(stack.engine)

    await stack.stop_workers()
    report = await replay(
        stack.js,
        stack.settings.stream_name,
        stack.engine,
        stack.sessions,
        build_projections(stack.settings, ALL_COMPONENTS, await stack.retrieval_resources()),
    )

    assert before == report.checksums
    assert before == await read_model_checksums(stack.engine)
    folded = report.events_by_type
    assert 3 * 12 == folded["turn.recorded.v1"]
    assert 3 * 5 == folded["page.evicted.v1"]  # 12 turns into a FIFO of 7, per user
