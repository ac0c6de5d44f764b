"""The JetStream decision log against a real nats-server: the first copy of a decision wins."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
from nats.js.errors import NotFoundError

from memoryd.services.runtime.decisions import JetStreamDecisionLog, pipelined
from memoryd.shared.adapters.nats_log import ensure_streams, subject_of
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.memoryos import PageChained
from memoryd.shared.settings import Settings

pytestmark = pytest.mark.integration


def chained(summary: str) -> PageChained:
    """Return a page-chained decision with a fixed id and the given summary."""
    return PageChained(
        event_id=uuid.UUID(int=7),
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        scope=Scope(tenant="t", user_id="u"),
        turn_id=uuid.UUID(int=1),
        linked=False,
        meta_chain=summary,
        decided_by="test",
    )


async def test_a_redecided_event_returns_the_copy_the_stream_kept(
    nats_url: str, tmp_path: Path
) -> None:
    """A second answer under the same id (a redelivered trigger) gives back the first."""
    settings = Settings(data_dir=tmp_path, stream_name="DECISIONS_TEST")
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, settings)
    try:
        decisions = JetStreamDecisionLog(js, settings.stream_name)
        first = await decisions.record(chained("first answer"))
        second = await decisions.record(chained("second answer"))
        info = await js.stream_info(settings.stream_name)
    finally:
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(settings.stream_name)
        await nc.close()

    assert ("first answer", "first answer") == (first.meta_chain, second.meta_chain)
    assert 1 == info.state.messages


async def test_a_batch_that_fails_leaves_no_acknowledgement_waiting(nats_url: str) -> None:
    """Decisions a failing batch sent without waiting are given up: none keeps one of the
    client's pending-publish slots (4,000 in all) while its answer may never come."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    decision = chained("sent, then the batch failed")
    silent = await nc.subscribe(subject_of(decision))  # takes it and never answers
    try:
        with pytest.raises(RuntimeError, match="the batch failed"):
            async with pipelined():
                await JetStreamDecisionLog(js, "NO_SUCH_STREAM").record(decision)
                raise RuntimeError("the batch failed")
        await asyncio.sleep(0)  # a cancelled future's callbacks run on the loop's next turn
        waiting = js.publish_async_pending()
    finally:
        await silent.unsubscribe()
        await nc.close()

    assert 0 == waiting
