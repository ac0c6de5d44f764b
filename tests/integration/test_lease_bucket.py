"""Leases on a real JetStream key-value bucket: shares, takeover and taking back by name.

The workers here are stand-ins that record whether they run: what is under test is who holds
which partition, in the bucket nats-server keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from memoryd.services.runtime.leases import Lane, Leases
from tests.conftest import unique

pytestmark = pytest.mark.integration

LANES = [f"memoryd-stm-p{n}" for n in range(4)]


@dataclass
class Worker:
    """Records that a lease started it and whether it was stopped."""

    name: str
    running: set[str]

    async def stop(self) -> None:
        self.running.discard(self.name)


def lanes(running: set[str]) -> list[Lane]:
    """Return the four lanes of one group, each starting a recording worker."""

    def lane(name: str) -> Lane:
        async def start() -> Worker:
            running.add(name)
            return Worker(name, running)

        return Lane(name, "memoryd-stm", start)

    return [lane(name) for name in LANES]


@pytest.fixture
async def bucket(nats_url: str) -> AsyncIterator[tuple[JetStreamContext, str]]:
    """Yield a JetStream context and the name of a lease bucket of the test's own."""
    nc = await nats.connect(nats_url)
    js, name = nc.jetstream(), unique("leases")
    yield js, name
    with contextlib.suppress(NotFoundError):
        await js.delete_key_value(name)
    await nc.close()


async def crash(leases: Leases) -> None:
    """Stop ticking without giving anything back, as a SIGKILLed process would."""
    assert leases._task is not None
    leases._task.cancel()
    await asyncio.gather(leases._task, return_exceptions=True)


async def test_a_replica_started_again_under_its_name_takes_its_partitions_back_at_once(
    bucket: tuple[JetStreamContext, str],
) -> None:
    """Leases of 30 s: the restarted replica does not wait for them; a stranger gets none."""
    js, name = bucket
    first_run: set[str] = set()
    first = Leases(js, name, lanes(first_run), ttl=30.0, holder="stm-1")
    await first.start()
    assert first_run == set(LANES)
    await crash(first)

    again_runs: set[str] = set()
    again = Leases(js, name, lanes(again_runs), ttl=30.0, holder="stm-1")
    started = time.monotonic()
    await again.start()
    took = time.monotonic() - started
    assert again_runs == set(LANES), "the same name takes its previous run's leases back"
    assert took < 10.0, f"taken back in {took:.1f} s: it waited for the leases to lapse"

    stranger_runs: set[str] = set()
    stranger = Leases(js, name, lanes(stranger_runs), ttl=30.0, holder="stm-9")
    await stranger.start()
    assert stranger_runs == set(), "the leases are held: a stranger must wait for them"
    await again.tick()  # two members now: it gives two back, the stranger takes them
    await stranger.tick()
    assert len(again_runs) == 2 and len(stranger_runs) == 2
    assert again_runs.isdisjoint(stranger_runs)
    await again.stop()
    await stranger.stop()


async def test_a_replica_started_beside_another_gives_back_what_exceeds_its_share(
    bucket: tuple[JetStreamContext, str],
) -> None:
    """Its previous run held all four; with a second member it keeps two and frees two at
    once (the other takes them on its next tick, not after the 30 s leases lapse)."""
    js, name = bucket
    first = Leases(js, name, lanes(set()), ttl=30.0, holder="stm-1")
    await first.start()
    await crash(first)
    other_runs: set[str] = set()
    other = Leases(js, name, lanes(other_runs), ttl=30.0, holder="stm-2")
    await other.start()
    assert other_runs == set()
    again_runs: set[str] = set()
    again = Leases(js, name, lanes(again_runs), ttl=30.0, holder="stm-1")
    await again.start()
    await other.tick()
    assert len(again_runs) == 2 and len(other_runs) == 2
    assert again_runs | other_runs == set(LANES)
    await again.stop()
    await other.stop()


async def test_a_crashed_replicas_partitions_go_to_another_once_they_lapse(
    bucket: tuple[JetStreamContext, str],
) -> None:
    """Without the name, the survivor takes them after the lease time, not before."""
    js, name = bucket
    dead_runs: set[str] = set()
    dead = Leases(js, name, lanes(dead_runs), ttl=1.5)
    await dead.start()
    await crash(dead)
    survivor_runs: set[str] = set()
    survivor = Leases(js, name, lanes(survivor_runs), ttl=1.5)
    started = time.monotonic()
    await survivor.start()
    assert survivor_runs == set(), "the dead replica's leases have not lapsed yet"
    while survivor_runs != set(LANES):
        assert time.monotonic() - started < 10.0, survivor_runs
        await asyncio.sleep(0.1)
    took = time.monotonic() - started
    assert took >= 1.0, f"taken over in {took:.1f} s, before the 1.5 s leases lapsed"
    await survivor.stop()


async def test_a_lease_that_lapses_while_it_is_taken_is_taken_on_the_next_tick(
    bucket: tuple[JetStreamContext, str],
) -> None:
    """The race a replica's start lost in the fault suite: the partition looks free, another
    member writes its lease before this member's create (refused), and that lease lapses
    before nats-py reads it back (not found). The start goes on; the next tick takes it.

    The server's answers are real; the test only orders them: the other member's write and
    the lapse (a purge of the key, as the bucket's age limit does) happen inside the create.
    """
    js, name = bucket
    runs: set[str] = set()
    leases = Leases(js, name, lanes(runs), ttl=30.0, holder="stm-1")
    kv = await leases._bucket()
    leases._kv = kv
    contested = LANES[0]
    write, read = kv._update, kv._get
    raced: list[str] = []

    async def update(key: str, value: bytes, **options: Any) -> int:
        if key == contested and options.get("last") == 0 and not raced:
            raced.append(key)
            await kv.put(key, b"stm-2")  # the other member, a moment earlier
        return await write(key, value, **options)

    async def get(key: str, *args: Any, **options: Any) -> Any:
        if key in raced:
            await js.purge_stream(f"KV_{name}", subject=f"$KV.{name}.{key}")  # it lapses
        return await read(key, *args, **options)

    kv._update, kv._get = update, get  # type: ignore[method-assign]
    await leases.start()
    assert raced == [contested]
    assert runs == set(LANES) - {contested}

    await leases.tick()

    assert runs == set(LANES)
    await leases.stop()
