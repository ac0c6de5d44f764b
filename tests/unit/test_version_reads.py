"""Unit tests of the shared versions read: one read serves the requests that queued for it."""

import asyncio

import pytest

from memoryd.services.recall.cache import VersionReads, Versions


async def test_requests_arriving_during_a_read_share_the_next_one_not_the_running_one() -> None:
    """A read begun before a request arrived is not its answer; later arrivals share one."""
    begun = 0
    running, release = asyncio.Event(), asyncio.Event()

    async def read() -> Versions:
        nonlocal begun
        begun += 1
        number = begun
        running.set()
        await release.wait()
        return {"memoryd-stm": number}

    reads = VersionReads(read)
    first = asyncio.create_task(reads())
    await running.wait()
    later = [asyncio.create_task(reads()) for _ in range(5)]
    await asyncio.sleep(0)
    release.set()

    assert {"memoryd-stm": 1} == await first
    assert [{"memoryd-stm": 2}] * 5 == await asyncio.gather(*later)
    assert 2 == reads.reads


async def test_one_caller_at_a_time_gets_a_read_of_its_own() -> None:
    """Requests that do not overlap each read anew."""
    count = 0

    async def read() -> Versions:
        nonlocal count
        count += 1
        return {"memoryd-stm": count}

    reads = VersionReads(read)

    assert [{"memoryd-stm": 1}, {"memoryd-stm": 2}, {"memoryd-stm": 3}] == [
        await reads() for _ in range(3)
    ]


async def test_a_failed_read_reaches_every_request_that_shared_it_and_the_next_reads_again() -> (
    None
):
    """The error is each waiting request's; the read after it is made afresh."""
    count = 0

    async def read() -> Versions:
        nonlocal count
        count += 1
        await asyncio.sleep(0)
        if count == 1:
            raise RuntimeError("the database went away")
        return {"memoryd-stm": count}

    reads = VersionReads(read)
    failed = await asyncio.gather(reads(), reads(), return_exceptions=True)

    assert [RuntimeError, RuntimeError] == [type(error) for error in failed]
    assert {"memoryd-stm": 2} == await reads()


async def test_a_request_given_up_leaves_the_shared_read_to_the_others() -> None:
    """Cancelling one waiting request does not cancel the read the others wait for."""
    release = asyncio.Event()

    async def read() -> Versions:
        await release.wait()
        return {"memoryd-stm": 1}

    reads = VersionReads(read)
    given_up, kept = asyncio.create_task(reads()), asyncio.create_task(reads())
    await asyncio.sleep(0)
    given_up.cancel()
    release.set()

    assert {"memoryd-stm": 1} == await kept
    with pytest.raises(asyncio.CancelledError):
        await given_up
