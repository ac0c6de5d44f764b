"""The MCP adapter turns a tool's result, a refusal and memoryd's own failure into MCP results."""

from __future__ import annotations

import json
import uuid
from typing import Any

from nats.errors import NoRespondersError

from memoryd.services.mcp.server import call_tool, mcp_tool
from memoryd.shared.client.tools import TOOLS, input_schema
from memoryd.shared.contracts import Scope

SCOPE = Scope(tenant="acme", user_id="alice")


class FakeClient:
    """Remembers with a fixed id; has no recall service to ask."""

    async def remember(self, scope: Scope, content: str, **_: Any) -> uuid.UUID:
        return uuid.UUID(int=3)

    async def recall(self, scope: Scope, query: str, **_: Any) -> None:
        raise NoRespondersError


async def test_a_result_is_json_text_and_structured_content() -> None:
    """The tool's result comes back as JSON text and as structured content alike."""
    result = await call_tool(FakeClient(), SCOPE, "remember", {"content": "vegan"})  # type: ignore[arg-type]

    assert not result.is_error
    assert {"memory_id": str(uuid.UUID(int=3)), "key": None} == result.structured_content
    assert result.structured_content == json.loads(result.content[0].text)  # type: ignore[union-attr]


async def test_a_refused_call_is_a_tool_error_naming_the_field() -> None:
    """Bad input is a tool error (the model reads it), not a protocol error."""
    result = await call_tool(FakeClient(), SCOPE, "recall", {"max_tokens": 0})  # type: ignore[arg-type]

    assert result.is_error
    assert result.content[0].text.startswith("recall: max_tokens:")  # type: ignore[union-attr]


async def test_memoryd_failing_is_a_tool_error_saying_so() -> None:
    """No recall service answering is reported as memoryd's failure, to try again later."""
    result = await call_tool(FakeClient(), SCOPE, "recall", {"query": "diet"})  # type: ignore[arg-type]

    assert result.is_error
    assert result.content[0].text.startswith("memoryd could not do recall:")  # type: ignore[union-attr]


def test_mcp_lists_the_shared_schema_and_hints() -> None:
    """MCP lists each tool with the shared input schema; only forget is destructive."""
    listed = {name: mcp_tool(tool) for name, tool in TOOLS.items()}

    assert input_schema(TOOLS["recall"]) == listed["recall"].input_schema
    assert {"forget"} == {n for n, t in listed.items() if t.annotations.destructive_hint}  # type: ignore[union-attr]
    assert {"recall", "list_memories", "memory_history"} == {
        n
        for n, t in listed.items()
        if t.annotations.read_only_hint  # type: ignore[union-attr]
    }
