"""The JetStream decision log against a real nats-server: the first copy of a decision wins."""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
from nats.js.errors import NotFoundError

from memoryd.services.runtime.decisions import JetStreamDecisionLog
from memoryd.shared.adapters.nats_log import ensure_streams
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
