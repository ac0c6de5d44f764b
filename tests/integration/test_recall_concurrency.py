"""The recall service answers requests side by side: a slow one does not hold back the rest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.embeddings import MINILM_DIMENSION
from memoryd.shared.adapters.index import Hit, ScopeFilter, SearchIndex, build_index
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration


class HeldIndex:
    """The real index, except that a BM25 search for a query naming "slow" waits for release."""

    def __init__(self, inner: SearchIndex) -> None:
        self._inner = inner
        self.entered = asyncio.Event()  # a slow search has started and is holding
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def search_sparse(self, text: str, filter: ScopeFilter, limit: int = 10) -> list[Hit]:
        if "slow" in text:
            self.entered.set()
            await self.release.wait()
        return await self._inner.search_sparse(text, filter, limit)


@pytest.fixture
async def held(
    settings: Settings, make_stack: StackFactory
) -> AsyncIterator[tuple[Stack, HeldIndex]]:
    index = build_index(None, settings.data_dir / "index", MINILM_DIMENSION)
    await index.ensure_collection()
    wrapped = HeldIndex(index)
    yield await make_stack(["recall"], index=wrapped), wrapped
    wrapped.release.set()
    await index.close()


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
