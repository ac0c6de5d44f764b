"""Workers refuse a log other than the one their read models were folded from.

Positions are stream sequences: a stream deleted and made again under the same name starts
at 1 again, and workers that kept their positions would skip its first events as applied.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from memoryd.services.bootstrap import AnotherLog, start_stack
from memoryd.shared.adapters.sql.tables import stm_pages
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import StackFactory, _delete_streams, unique

pytestmark = pytest.mark.integration


async def test_workers_refuse_a_new_stream_until_replayed(make_stack: StackFactory) -> None:
    first = await make_stack(["stm"])
    settings, scope = first.settings, Scope(tenant=unique("t"), user_id="alice")
    async with await MemoryClient.connect(first.nats_url) as client:
        await client.record_turn(scope, "the first log's turn", "ok")
        await client.wait_until_applied(timeout=60, consumers=["memoryd-stm"])
    await first.stop()
    await _delete_streams(settings.nats_url or "", settings)  # the log is made again, empty

    with pytest.raises(AnotherLog, match="memoryd replay"):
        await start_stack(settings, ["stm"])

    rebuilt = await start_stack(settings, components=())  # connections only, as replay runs
    try:
        report = await rebuilt.replay(["stm"])
    finally:
        await rebuilt.stop()
    running = await start_stack(settings, ["stm"])
    try:
        async with await MemoryClient.connect(running.nats_url) as client:
            await client.record_turn(scope, "the new log's first turn", "ok")
            await client.wait_until_applied(timeout=60, consumers=["memoryd-stm"])
        async with running.readers() as session:
            pages = (await session.execute(select(stm_pages.c.query))).scalars().all()
    finally:
        await running.stop()

    assert 0 == report.events
    assert ["the new log's first turn"] == list(pages)  # applied, not skipped as seen
