"""``bootstrap.both``: start-up opens NATS and SQL at once, and fails cleanly."""

from __future__ import annotations

import asyncio

import pytest

from memoryd.services.bootstrap import both
from memoryd.shared.settings import StartupError


async def test_both_returns_each_result_in_order() -> None:
    """The first awaitable's result first, whichever ends first."""

    async def late() -> str:
        await asyncio.sleep(0.02)
        return "nats"

    async def early() -> int:
        return 7

    assert ("nats", 7) == await both(late(), early())


async def test_a_failure_is_raised_after_the_other_has_finished() -> None:
    """What the other opened is on the exit stack before the error reaches the caller."""
    opened: list[str] = []

    async def slow() -> None:
        await asyncio.sleep(0.02)
        opened.append("nats")

    async def failing() -> None:
        raise StartupError("no database")

    with pytest.raises(StartupError, match="no database"):
        await both(slow(), failing())
    assert ["nats"] == opened
