"""Two replicas of a worker share a partitioned log; one killed mid-stream loses nothing.

Each replica is a `memoryd up --components stm,memories` process on the same NATS and
database, holding leases on half of the partitions. One is SIGKILLed while turns and
memories of interleaved users stream in; the survivor takes its partitions over once the
leases lapse. Every user's pages and memories then equal those of one worker fed the same
events.
"""

from __future__ import annotations

import time
from pathlib import Path

import nats
import pytest
from nats.js.errors import BucketNotFoundError

from memoryd.services.bootstrap import Stack
from memoryd.services.runtime.leases import bucket_of
from memoryd.services.runtime.leases import holders as leased_by
from memoryd.shared import subjects
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts.events import Event
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, _reset_database, unique
from tests.integration.test_partitions import conversation, user_state
from tests.integration.test_processes import clean_log, memoryd_process, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PARTITIONS = 4
LEASE_SECONDS = 2.0
COMPONENTS = "stm,memories"
CONSUMERS = [subjects.STM_CONSUMER, subjects.MEMORIES_CONSUMER, subjects.GATE_CONSUMER]


async def holders(js: nats.js.JetStreamContext, stream: str) -> dict[str, str]:
    """Return each leased consumer and the replica holding it."""
    try:
        kv = await js.key_value(bucket_of(stream))
    except BucketNotFoundError:
        return {}
    return await leased_by(kv, subjects.partition_consumers(CONSUMERS, PARTITIONS))


async def test_a_replica_killed_mid_stream_is_taken_over_and_loses_nothing(
    nats_url: str, database_url: str, tmp_path: Path, make_stack: StackFactory
) -> None:
    """Interleaved users over two replicas, one killed: the same memory as a single worker."""
    tenant = unique("t")
    events = conversation(tenant, users=8, turns=12)
    expected = await single_worker_state(make_stack, tenant, events)
    await _reset_database(Settings(database_url=database_url))  # the replicas' own log next

    nc, settings = await clean_log(nats_url)
    js = nc.jetstream()
    env = {
        "MEMORYD_NATS_URL": nats_url,
        "MEMORYD_DATABASE_URL": database_url,
        "MEMORYD_PARTITIONS": str(PARTITIONS),
        "MEMORYD_LEASE_SECONDS": str(LEASE_SECONDS),
        "MEMORYD_ACK_WAIT_SECONDS": "3",
    }
    up = ["up", "--components", COMPONENTS]
    with (
        memoryd_process(
            up, {**env, "MEMORYD_DATA_DIR": str(tmp_path / "a")}, tmp_path / "a.log"
        ) as a,
        memoryd_process(up, {**env, "MEMORYD_DATA_DIR": str(tmp_path / "b")}, tmp_path / "b.log"),
    ):
        await wait_for(lambda: shared_by_two(js, settings.stream_name), 60)
        client = MemoryClient(nc)
        half = len(events) // 2
        await client.publish_many(events[:half])
        a.kill()
        killed_at = time.monotonic()
        await client.publish_many(events[half:])
        await wait_for(lambda: held_by_one(js, settings.stream_name), 60)
        takeover = time.monotonic() - killed_at
        await client.wait_until_applied(timeout=120, consumers=CONSUMERS)
        survivor = (await holders(js, settings.stream_name)).values()
    await nc.close()
    engine = create_engine(database_url)
    found = await user_state(session_factory(engine, writer=False), tenant)
    await engine.dispose()

    print(f"partitions taken over {takeover:.1f} s after the kill")
    assert 1 == len(set(survivor))
    assert expected == found


async def single_worker_state(
    make_stack: StackFactory, tenant: str, events: list[Event]
) -> dict[str, object]:
    """Return what one unpartitioned worker makes of ``events``."""
    stack: Stack = await make_stack(components=("stm", "memories"))
    async with await MemoryClient.connect(stack.nats_url) as client:
        await client.publish_many(events)
        await client.wait_until_applied(timeout=120, consumers=CONSUMERS)
    state = await user_state(stack.sessions, tenant)
    await stack.stop()
    return state


async def shared_by_two(js: nats.js.JetStreamContext, stream: str) -> bool:
    held = await holders(js, stream)
    return len(held) == 2 * PARTITIONS + 1 and len(set(held.values())) == 2


async def held_by_one(js: nats.js.JetStreamContext, stream: str) -> bool:
    held = await holders(js, stream)
    return len(held) == 2 * PARTITIONS + 1 and len(set(held.values())) == 1
