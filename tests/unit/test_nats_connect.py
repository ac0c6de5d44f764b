"""Connecting gives up on time even when the connecting task loses a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from memoryd.shared.adapters.nats_log import finished_within


async def stubborn(lost: list[int]) -> None:
    """Retry for ever, losing the first cancellation as an inner wait that completes does
    (CPython gh-86296): what nats-py's connect did under load."""
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(1)


async def test_a_task_that_loses_a_cancellation_is_cancelled_again_and_ends() -> None:
    """Past the timeout the task is cancelled until it ends; the call answers False."""
    lost: list[int] = []
    task = asyncio.ensure_future(stubborn(lost))
    call = asyncio.ensure_future(finished_within(task, 0.05))

    done, _ = await asyncio.wait({call}, timeout=5)

    assert (call in done, [1], True) == (True, lost, task.cancelled())
    assert call.result() is False


async def test_a_task_that_ends_in_time_is_reported_and_its_error_raised() -> None:
    """A task done within the timeout answers True; one that failed raises its error."""

    async def fails() -> None:
        raise ConnectionRefusedError("no server")

    assert await finished_within(asyncio.ensure_future(asyncio.sleep(0)), 1.0)
    with pytest.raises(ConnectionRefusedError, match="no server"):
        await finished_within(asyncio.ensure_future(fails()), 1.0)
