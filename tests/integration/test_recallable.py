"""Recallable notifications and per-user waits on a real nats-server (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import pytest
from nats.js import JetStreamContext

from memoryd.services.bootstrap import build_model
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings.port import Embedder, Vectors
from memoryd.shared.adapters.nats_log import last_sequence_on
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration

WAIT = 60.0


def scope_for(**extra: str) -> Scope:
    """Return a fresh tenant and user."""
    return Scope(tenant=unique("t"), user_id=unique("u"), **extra)


class GatedEmbedder:
    """The real model, except that texts holding ``word`` wait until ``gate`` opens."""

    def __init__(self, inner: Embedder, word: str) -> None:
        self.inner = inner
        self.word = word
        self.gate = asyncio.Event()
        self.model_name = inner.model_name
        self.dimension = inner.dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if any(self.word in text for text in texts):
            await self.gate.wait()
        return await self.inner.embed(texts)


async def test_a_turn_is_recalled_as_soon_as_it_is_recallable(
    make_stack: StackFactory, settings: Settings
) -> None:
    """Right after ``recallable(turn_id)`` recall shows the turn: as a page and from the index."""
    stack = await make_stack()
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        scope = scope_for(session_id="s1")
        turn_id = await client.record_turn(scope, "I keep bees on my roof", "How many hives?")

        notice = await client.recallable(turn_id, timeout=WAIT)
        paged = await client.recall(scope, "bees on the roof")
        searched = await client.recall(scope, "bees on the roof", include_pages=False)

    assert ("recallable", turn_id, scope.user_id) == (
        notice.kind,
        notice.event_id,
        notice.user_id,
    )
    assert turn_id in [page.turn_id for page in paged.pages]
    assert str(turn_id) in [item.turn_id for item in searched.items]


async def test_a_memory_is_recalled_as_soon_as_it_is_recallable(
    make_stack: StackFactory,
) -> None:
    """Right after ``recallable(event_id, scope=...)`` of a remembered memory, recall shows it."""
    stack = await make_stack()
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        scope = scope_for()
        event_id = uuid.uuid4()
        memory_id = await client.remember(
            scope, "Ana is allergic to peanuts", key="allergy", event_id=event_id
        )

        notice = await client.recallable(event_id, timeout=WAIT, scope=scope)
        answer = await client.recall(scope, "peanuts allergy")

    assert (memory_id,) == notice.item_ids
    assert memory_id in [memory.memory_id for memory in answer.memories]


async def test_recallable_returns_for_an_event_notified_before_the_call(
    make_stack: StackFactory,
) -> None:
    """A notice already in the notification stream counts: the call does not wait for another."""
    stack = await make_stack()
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        scope = scope_for()
        turn_id = await client.record_turn(scope, "first question", "first answer")
        await client.recallable(turn_id, timeout=WAIT)

        again = await client.recallable(turn_id, timeout=WAIT)

    assert turn_id == again.event_id


async def test_recallable_times_out_for_an_event_never_written(make_stack: StackFactory) -> None:
    """An id no event carries is never recallable: the wait ends in TimeoutError."""
    stack = await make_stack()
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        with pytest.raises(TimeoutError):
            await client.recallable(uuid.uuid4(), timeout=0.5)


async def settled(client: MemoryClient, js: JetStreamContext, stream: str, scope: Scope) -> None:
    """Wait until every consumer applied ``scope``'s events and no newer one was derived.

    Workers publish derived events before they ack the cause, so once every consumer passed
    the newest event of the scope and none is newer, the scope's cascade has ended.
    """
    wanted = subjects.user_events_filter(scope.tenant, scope.user_id)
    while True:
        applied = await client.wait_until_applied(timeout=WAIT, scope=scope)
        if await last_sequence_on(js, stream, wanted) == applied:
            return


async def test_a_scoped_wait_returns_while_another_users_backlog_is_pending(
    make_stack: StackFactory, settings: Settings
) -> None:
    """``wait_until_applied(scope=...)`` returns with another user's turn stuck in the indexer."""
    model = GatedEmbedder(build_model(settings), "GATED")
    stack = await make_stack(embedder=model)
    ours, theirs = scope_for(), scope_for()
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        try:
            turn_id = await client.record_turn(ours, "my cat is called Miso", "Nice name")
            await client.recallable(turn_id, timeout=WAIT)
            # Our turn's derived events settle first: the indexer folds a batch as one, so an
            # event of ours fetched beside the gated turn would be held with it.
            await settled(client, stack.js, stack.settings.stream_name, ours)
            # unique text: PostgreSQL's embedding cache outlives the test
            await client.record_turn(theirs, unique("GATED question"), "GATED answer")

            applied = await client.wait_until_applied(timeout=WAIT, scope=ours)
            indexer = await stack.js.consumer_info(
                stack.settings.stream_name, subjects.INDEXER_CONSUMER
            )
            answer = await client.recall(ours, "cat name")
            with pytest.raises(TimeoutError):
                await client.wait_until_applied(timeout=0.5)
        finally:
            model.gate.set()
        await client.wait_until_applied(timeout=WAIT)

    assert applied < indexer.delivered.stream_seq
    assert (indexer.ack_floor.stream_seq or 0) < indexer.delivered.stream_seq
    assert turn_id in [page.turn_id for page in answer.pages]


async def test_no_recallable_notice_while_the_index_lacks_the_turn(
    make_stack: StackFactory, settings: Settings
) -> None:
    """A turn the pages hold but the index does not yet is not recallable; once indexed, it is."""
    model = GatedEmbedder(build_model(settings), "GATED")
    stack = await make_stack(embedder=model)
    scope = scope_for(session_id="s1")
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        try:
            query = unique("GATED: my boat is blue")  # not in PostgreSQL's embedding cache
            turn_id = await client.record_turn(scope, query, "Nice boat")
            await client.wait_until_applied(
                timeout=WAIT, consumers=[subjects.STM_CONSUMER], scope=scope
            )
            with pytest.raises(TimeoutError):
                await client.recallable(turn_id, timeout=0.5)
        finally:
            model.gate.set()

        notice = await client.recallable(turn_id, timeout=WAIT)
        searched = await client.recall(scope, "blue boat", include_pages=False)

    assert turn_id == notice.event_id
    assert str(turn_id) in [item.turn_id for item in searched.items]
