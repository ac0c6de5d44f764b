"""``bootstrap.settled``: start-up opens NATS, SQL and the index at once, and fails cleanly."""

from __future__ import annotations

import asyncio

import pytest

from memoryd.services.bootstrap import settled
from memoryd.shared.settings import StartupError


async def test_settled_returns_each_result_in_order() -> None:
    """The first awaitable's result first, whichever ends first."""

    async def late() -> str:
        await asyncio.sleep(0.02)
        return "nats"

    async def early() -> int:
        return 7

    async def between() -> str:
        await asyncio.sleep(0.01)
        return "index"

    assert ["nats", 7, "index"] == await settled(late(), early(), between())


async def test_a_failure_is_raised_after_the_others_have_finished() -> None:
    """What the others opened is on the exit stack before the error reaches the caller."""
    opened: list[str] = []

    async def slow(name: str) -> None:
        await asyncio.sleep(0.02)
        opened.append(name)

    async def failing() -> None:
        raise StartupError("no database")

    with pytest.raises(StartupError, match="no database"):
        await settled(slow("nats"), failing(), slow("index"))
    assert ["nats", "index"] == opened
