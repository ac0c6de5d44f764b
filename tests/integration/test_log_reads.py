"""Reads of the log on a three-node cluster while a replica catches up are complete.

A node that was down while the stream grew catches its replica up when it returns. A reader
(an ephemeral consumer) placed on that node counts only what the replica holds and reports
nothing pending: unchecked, some reads come back short and say nothing. This test makes
that window (one node down while 10,000 messages of 2 KB are written, one in 100 a small
event), then reads as the service does (readers on the stream's leader; replay's reader
asks the leader what is left) while the node catches up: every read has every event.
(With the placement disabled, such reads came back with part of the events;
a tenant's reads, which cannot ask which node leads, still can.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from memoryd.services.cluster import NatsCluster
from memoryd.services.runtime.replay import read_log
from memoryd.shared.adapters.nats_log import connect, last_sequence_on, read_subjects

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

STREAM = "READS"
MESSAGES = 10_000  # what the returning node must catch up on: 20 MB
EVENT_EVERY = 100  # one message in 100 is an event
BODY = b"x" * 2_000
FILTER = "memoryd.ev.t.*.turn"
ROUNDS = 12  # the window is seconds long: rounds go on until reads fell in it (few when quick)
WINDOW_READS = 5


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    """Three nodes that catch a replica up 64 KB at a time: the window lasts seconds."""
    running = NatsCluster(tmp_path)
    for node in running.nodes:
        store = str((node.data_dir / "jetstream").resolve())
        node.options["jetstream"] = {"store_dir": store, "max_outstanding_catchup": 65_536}
    await running.start()
    try:
        yield running
    finally:
        await running.stop()


async def _publish(js: JetStreamContext, number: int) -> None:
    event = number % EVENT_EVERY == 0
    for _ in range(100):  # the leader may move while the node is away: publish again
        try:
            await js.publish(
                f"memoryd.ev.t.u{number % 20}.turn" if event else "bulk",
                b"turn" if event else BODY,
                stream=STREAM,
                timeout=5,
                headers={"Nats-Msg-Id": str(number)},
            )
            return
        except Exception:
            await asyncio.sleep(0.2)
    raise AssertionError(f"message {number} was never acknowledged")


async def _behind(js: JetStreamContext) -> bool:
    """Return whether the stream's leader reports a replica not yet current."""
    cluster = (await js.stream_info(STREAM)).cluster
    return cluster is not None and any(not r.current for r in cluster.replicas or [])


async def _reads(
    js: JetStreamContext, seconds: float, missing: Callable[[], Awaitable[int]]
) -> tuple[list[int], int]:
    """Each read's count of events missing, and how many began while a replica was behind."""
    counts: list[int] = []
    while_behind = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            behind = await _behind(js)
            counts.append(await missing())
            while_behind += behind
        except (TimeoutError, OSError):
            continue  # an election: the read says so rather than answering short
    return counts, while_behind


async def _events(js: JetStreamContext, written: int) -> int:
    return written // EVENT_EVERY - len(await read_subjects(js, STREAM, [FILTER]))


async def _newest(js: JetStreamContext, written: int) -> int:
    return written - EVENT_EVERY + 1 - await last_sequence_on(js, STREAM, FILTER)


async def _log(js: JetStreamContext, written: int) -> int:
    return written // EVENT_EVERY - len(await read_log(js, STREAM, until=written, patience=10))


async def test_reads_during_a_replicas_catch_up_are_complete(cluster: NatsCluster) -> None:
    nc = await connect(cluster.url, name="reads-test", timeout=10)
    js = nc.jetstream()
    missing: dict[str, list[int]] = {"events": [], "newest": [], "log": []}
    behind = dict.fromkeys(missing, 0)
    try:
        await js.add_stream(name=STREAM, subjects=["memoryd.ev.>", "bulk"], num_replicas=3)
        written = 0
        # How long a replica takes to catch up varies: rounds until each kind of read ran
        # while one was behind, at least WINDOW_READS times.
        for _ in range(ROUNDS):
            if min(behind.values()) >= WINDOW_READS:
                break
            await asyncio.to_thread(cluster.nodes[0].kill)
            for start in range(written, written + MESSAGES, 500):
                await asyncio.gather(*(_publish(js, n) for n in range(start, start + 500)))
            written += MESSAGES
            await cluster.nodes[0].astart()
            # A loop for each kind of read (replay's waits for the replica to catch up).
            reads = await asyncio.gather(
                *(_reads(js, 4, partial(read, js, written)) for read in (_events, _newest, _log))
            )
            for kind, (counts, while_behind) in zip(missing, reads, strict=True):
                missing[kind] += counts
                behind[kind] += while_behind
    finally:
        await nc.close()
    assert min(behind.values()) >= WINDOW_READS, f"reads while a replica was behind: {behind}"
    assert {kind: {0} for kind in missing} == {kind: set(c) for kind, c in missing.items()}
