"""A worker SIGKILLed inside its first batch loses nothing once restarted, for every projection.

The killed worker had the first message delivered and not acked; after the restart later
messages arrive first and the first one only after ack_wait. `memoryd verify` then compares the
live read models and index with a fresh fold of the log.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest
from nats.js.errors import NotFoundError

from memoryd.shared import subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import PageEvicted, Scope
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.memoryos import PromotedPage, SegmentPromoted
from tests.conftest import unique
from tests.integration.test_processes import clean_log, memoryd_process, wait_for, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.model]

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

# component -> its consumer; "chain" needs "stm"'s evictions for nothing, the tiers fold turns.
CONSUMERS = {
    "stm": subjects.STM_CONSUMER,
    "memories": subjects.MEMORIES_CONSUMER,
    "indexer": subjects.INDEXER_CONSUMER,
    "graph": subjects.GRAPH_CONSUMER,
    "chain": subjects.CHAIN_CONSUMER,
    "mtm": subjects.MTM_CONSUMER,
    "persona": subjects.PERSONA_CONSUMER,
}
TIERS = ("mtm", "persona")  # workers of derived events only


async def _delivered(js: nats.js.JetStreamContext, stream: str, consumer: str) -> bool:
    try:
        info = await js.consumer_info(stream, consumer)
    except NotFoundError:
        return False
    return (info.delivered.stream_seq or 0) >= 1


def _tier_input(component: str, scope: Scope, day: int) -> Event:
    """Return an event the MTM or persona worker folds (in a full stack, STM and MTM derive
    them; here the worker runs alone, and its consumer reads only the types it folds)."""
    at, text = T0 + timedelta(minutes=day), f"Day {day}: I walked Pixel"
    if component == "mtm":
        turn = uuid.uuid4()
        return PageEvicted(
            cause_event_id=uuid.uuid4(),
            occurred_at=at,
            scope=scope,
            turn_id=turn,
            query=text,
            response="Nice",
            turn_occurred_at=at,
        )
    page = PromotedPage(turn_id=uuid.uuid4(), session_id="s1", query=text, response="Nice")
    return SegmentPromoted(
        cause_event_id=uuid.uuid4(),
        occurred_at=at,
        scope=scope,
        segment_id=f"segment-{day}",
        heat=6.0,
        visits_at_promotion=0,
        pages=(page,),
    )


async def _publish(client: MemoryClient, scope: Scope, component: str, day: int) -> None:
    """Publish what ``component`` folds for ``day`` (day 0: the first batch)."""
    if component in TIERS:
        await client.publish(_tier_input(component, scope, day))
        return
    if component == "memories" and day == 0:
        await client.remember(scope, "Alice is vegetarian", key="diet", occurred_at=T0)
    text = "I adopted a greyhound named Pixel" if day == 0 else f"Day {day}: I walked Pixel"
    await client.record_turn(scope, text, "Nice", T0 + timedelta(minutes=day))


@pytest.mark.parametrize("component", sorted(CONSUMERS))
async def test_a_kill_inside_the_first_batch_loses_nothing(
    nats_url: str, tmp_path: Path, component: str
) -> None:
    """Publish, SIGKILL as the first batch is in hand, restart, publish more: verify is equal."""
    nc, settings = await clean_log(nats_url)
    js = nc.jetstream()
    # ack_wait longer than a restart: seq 1 comes back last.
    env = worker_env(nats_url, tmp_path, MEMORYD_ACK_WAIT_SECONDS="10", HF_HUB_OFFLINE="1")
    consumer = CONSUMERS[component]
    client = MemoryClient(nc)
    scope = Scope(tenant="kill", user_id=unique("u"), session_id="s1")
    log = tmp_path / "worker.log"
    with memoryd_process(["up", "--components", component], env, log) as worker:
        await wait_for(lambda: _consumer_exists(js, settings.stream_name, consumer), 120)
        await _publish(client, scope, component, 0)
        await wait_for(lambda: _delivered(js, settings.stream_name, consumer))
        worker.kill()
        worker.wait(10)

    with memoryd_process(["up", "--components", component], env, log) as worker:
        for day in range(1, 11):
            await _publish(client, scope, component, day)
        await client.wait_until_applied(timeout=120, consumers=[consumer])
        worker.kill()
        worker.wait(10)

    verify = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memoryd.services.cli",
        "verify",
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output = (await asyncio.wait_for(verify.communicate(), 300))[0].decode()
    await js.delete_stream(settings.stream_name)
    await nc.close()
    assert 0 == verify.returncode, output[-3000:]
    assert "the read models equal the log" in output


async def _consumer_exists(js: nats.js.JetStreamContext, stream: str, consumer: str) -> bool:
    try:
        await js.consumer_info(stream, consumer)
    except NotFoundError:
        return False
    return True
