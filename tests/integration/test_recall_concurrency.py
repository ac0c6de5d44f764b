"""The recall service answers requests side by side: a slow one does not hold back the rest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import nats.errors
import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.embeddings import MINILM_DIMENSION
from memoryd.shared.adapters.index import Hit, ScopeFilter, SearchIndex, build_index
from memoryd.shared.client import MemoryClient, RecallFailed, RecallOverloaded
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.recall import RecallRequest
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration


class HeldIndex:
    """The real index, except that a BM25 search for a query naming "slow" waits for release."""

    def __init__(self, inner: SearchIndex) -> None:
        self._inner = inner
        self.entered = asyncio.Event()  # a slow search has started and is holding
        self.release = asyncio.Event()
        self.searched: list[str] = []  # every BM25 query the service worked on

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def search_sparse(self, text: str, filter: ScopeFilter, limit: int = 10) -> list[Hit]:
        self.searched.append(text)
        if "slow" in text:
            self.entered.set()
            await self.release.wait()
        return await self._inner.search_sparse(text, filter, limit)


async def _held_stack(
    settings: Settings, make_stack: StackFactory, changes: dict[str, Any] | None = None
) -> AsyncIterator[tuple[Stack, HeldIndex]]:
    index = build_index(None, settings.data_dir / "index", MINILM_DIMENSION)
    await index.ensure_collection()
    wrapped = HeldIndex(index)
    yield await make_stack(["recall"], changes=changes, index=wrapped), wrapped
    wrapped.release.set()
    await index.close()


@pytest.fixture
async def held(
    settings: Settings, make_stack: StackFactory
) -> AsyncIterator[tuple[Stack, HeldIndex]]:
    async for pair in _held_stack(settings, make_stack):
        yield pair


@pytest.fixture
async def held_unqueued(
    settings: Settings, make_stack: StackFactory
) -> AsyncIterator[tuple[Stack, HeldIndex]]:
    """A recall service that works on one request at a time and queues none."""
    changes = {"recall_concurrency": 1, "recall_backlog": 0}
    async for pair in _held_stack(settings, make_stack, changes):
        yield pair


@pytest.fixture
async def held_single(
    settings: Settings, make_stack: StackFactory
) -> AsyncIterator[tuple[Stack, HeldIndex]]:
    """A recall service that works on one request at a time and queues one more."""
    changes = {"recall_concurrency": 1, "recall_backlog": 1}
    async for pair in _held_stack(settings, make_stack, changes):
        yield pair


async def test_a_slow_recall_does_not_hold_back_the_next(
    held: tuple[Stack, HeldIndex],
) -> None:
    """While one request waits on the index, another is answered; the first then completes."""
    stack, index = held
    client = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    scope = Scope(tenant=unique("t"), user_id=unique("u"))
    try:
        slow = asyncio.create_task(client.recall(scope, "a slow question", timeout=60.0))
        await asyncio.wait_for(index.entered.wait(), 20.0)  # in the service, on the index

        fast = await client.recall(scope, "a quick question", timeout=20.0)

        assert not slow.done()
        assert [] == fast.items
        index.release.set()
        assert [] == (await slow).items
    finally:
        await client.close()


async def test_past_capacity_a_request_is_refused_at_once(
    held_unqueued: tuple[Stack, HeldIndex],
) -> None:
    """One request running fills a service with no queue: the next is refused, not queued.

    (Queueing up to the backlog is tested in tests/unit/test_recall_admission.py.)
    """
    stack, index = held_unqueued
    client = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    scope = Scope(tenant=unique("t"), user_id=unique("u"))
    try:
        slow = asyncio.create_task(client.recall(scope, "a slow question", timeout=60.0))
        await asyncio.wait_for(index.entered.wait(), 20.0)

        with pytest.raises(RecallOverloaded, match="overloaded"):
            await client.recall(scope, "one too many", timeout=60.0)

        assert not slow.done()
        index.release.set()
        assert [] == (await slow).items
        assert "one too many" not in index.searched
    finally:
        await client.close()


async def test_a_request_whose_deadline_passed_is_dropped_unworked(
    held_single: tuple[Stack, HeldIndex],
) -> None:
    """A request that waited past its caller's timeout is never searched; a late one is told."""
    stack, index = held_single
    client = await MemoryClient.connect(stack.nats_url, stack.settings.stream_name)
    scope = Scope(tenant=unique("t"), user_id=unique("u"))
    try:
        slow = asyncio.create_task(client.recall(scope, "a slow question", timeout=60.0))
        await asyncio.wait_for(index.entered.wait(), 20.0)
        # Its deadline and the caller's timer end together: whichever fires first, the caller
        # gets no answer (the service's refusal can arrive before the caller gives up).
        with pytest.raises((nats.errors.TimeoutError, RecallFailed)) as impatient:
            await client.recall(scope, "an impatient question", timeout=0.5)
        if isinstance(impatient.value, RecallFailed):
            assert "deadline_exceeded" == impatient.value.error.code
        late = RecallRequest(scope=scope, query="a late question", deadline=datetime.now(UTC))

        with pytest.raises(RecallFailed, match="deadline_exceeded"):
            await client.recall_raw(scope.tenant, late.model_dump_json().encode(), timeout=20.0)

        index.release.set()
        await slow
        await client.recall(scope, "a question after", timeout=20.0)
        assert "an impatient question" not in index.searched
        assert "a late question" not in index.searched
        assert "a question after" in index.searched
    finally:
        await client.close()
