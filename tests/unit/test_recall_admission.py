"""Admission control of the recall service (pure asyncio, no stack)."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio

import pytest

from memoryd.services.recall.admission import Admission, DeadlinePassed


async def test_room_counts_the_running_and_the_waiting() -> None:
    """One worker and one place in the queue: a third request finds no room."""
    admission = Admission(workers=1, backlog=1)
    release = asyncio.Event()

    async def hold() -> None:
        async with admission.slot(None):
            await release.wait()

    running = asyncio.create_task(hold())
    waiting = asyncio.create_task(hold())
    await asyncio.sleep(0)
    full = not admission.has_room()
    release.set()
    await asyncio.gather(running, waiting)

    assert (2, True, True) == (admission.capacity, full, admission.has_room())


async def test_a_wait_past_the_deadline_gives_up_and_frees_its_place() -> None:
    """A request that cannot get a worker in time raises DeadlinePassed and leaves the queue."""
    admission = Admission(workers=1, backlog=1)
    release = asyncio.Event()

    async def hold() -> None:
        async with admission.slot(None):
            await release.wait()

    running = asyncio.create_task(hold())
    await asyncio.sleep(0)
    with pytest.raises(DeadlinePassed):
        async with admission.slot(0.01):
            pass
    room_after = admission.has_room()
    release.set()
    await running

    assert room_after
