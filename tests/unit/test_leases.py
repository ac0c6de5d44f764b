"""Replicas' shares of a partitioned log: each holds ceil(partitions / members) of a group."""

from __future__ import annotations

import asyncio
from typing import cast

from nats.js import JetStreamContext

from memoryd.services.runtime.leases import Leases, Moves, plan

STM = [f"memoryd-stm-p{p}" for p in range(4)]


def test_a_lone_member_takes_every_free_partition() -> None:
    """One replica runs the whole log."""
    assert Moves(take=tuple(STM)) == plan({"stm": STM}, set(), set(), {"stm": 1})


def test_a_member_over_its_share_gives_the_rest_back() -> None:
    """When a second replica joins, the first releases half, for the newcomer to take."""
    held = set(STM)

    assert Moves(release=tuple(STM[2:])) == plan({"stm": STM}, held, held, {"stm": 2})


def test_a_member_takes_only_free_partitions_up_to_its_share() -> None:
    """Partitions another member holds are left alone; the share counts what it holds."""
    taken = {STM[0], STM[1], STM[2]}

    assert Moves(take=(STM[3],)) == plan({"stm": STM}, set(), taken, {"stm": 2})
    assert Moves() == plan({"stm": STM}, {STM[3], STM[2]}, taken | {STM[3]}, {"stm": 2})


def test_a_dead_members_partitions_are_taken_once_its_leases_lapse() -> None:
    """With the other member gone (its membership and leases expired), the survivor takes all."""
    mine = {STM[0], STM[1]}

    assert Moves(take=(STM[2], STM[3])) == plan({"stm": STM}, mine, mine, {"stm": 1})


def test_groups_are_shared_each_on_their_own() -> None:
    """A replica running two projections takes its share of each."""
    gate = ["memoryd-gate"]
    moves = plan({"stm": STM, "gate": gate}, set(), {"memoryd-gate"}, {"stm": 2, "gate": 2})

    assert Moves(take=(STM[0], STM[1])) == moves


async def test_stopping_ends_a_ticker_whose_tick_lost_the_cancellation() -> None:
    """A tick's NATS request can swallow the cancellation (CPython gh-86296, nats-py's
    waits): the ticker goes on to its next sleep, and stop asks again rather than wait for
    ever (a fault test's stop hung 300 s so)."""
    leases = Leases(js=cast(JetStreamContext, None), bucket="leases", lanes=(), ttl=0.03)
    ticks: list[int] = []

    async def tick_losing_the_first_cancellation() -> None:
        try:
            await asyncio.sleep(1.0)  # a request to NATS: where the first cancellation lands
        except asyncio.CancelledError:
            if ticks:
                raise
        ticks.append(1)

    leases.tick = tick_losing_the_first_cancellation  # type: ignore[method-assign]
    leases._task = asyncio.create_task(leases._every_tick())
    await asyncio.sleep(0.05)

    stopped = asyncio.ensure_future(leases.stop())
    done, _ = await asyncio.wait({stopped}, timeout=5)

    assert stopped in done
    assert leases._task.done()
