"""Payload limits: an oversized publish gets a clear error and nothing is stored."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memoryd.services.bootstrap import Stack
from memoryd.shared.adapters.nats_log import PayloadTooLarge, last_sequence
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.events import MAX_TEXT_CHARS
from tests.conftest import unique

pytestmark = pytest.mark.integration


async def test_an_oversized_publish_is_refused_with_a_clear_error(
    stack: Stack, client: MemoryClient
) -> None:
    """Metadata past the server's max_payload: PayloadTooLarge, the log unchanged."""
    scope = Scope(tenant=unique("t"), user_id="alice")
    before = await last_sequence(stack.js, stack.settings.stream_name)
    blob = "x" * (stack.nc.max_payload + 1)

    with pytest.raises(PayloadTooLarge, match="max_payload"):
        await client.remember(scope, "a note", metadata={"blob": blob})
    with pytest.raises(ValidationError, match=f"at most {MAX_TEXT_CHARS} characters"):
        await client.record_turn(scope, "q" * (MAX_TEXT_CHARS + 1), "a")

    assert before == await last_sequence(stack.js, stack.settings.stream_name)
