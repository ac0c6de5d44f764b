"""The tool definitions: schemas from the argument models, which mirror the contracts; the
executor refuses bad input and any scope argument before it calls the client."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pydantic import BaseModel

from memoryd.shared.client.tools import (
    SCOPE_ARGUMENTS,
    TOOLS,
    ForgetArguments,
    ListMemoriesArguments,
    MemoryHistoryArguments,
    RecallArguments,
    RecordTurnArguments,
    RememberArguments,
    ToolCallError,
    execute_tool_call,
    input_schema,
    json_schema,
    parse_arguments,
    tool_schemas,
)
from memoryd.shared.contracts import (
    ListMemoriesRequest,
    MemoryForgotten,
    MemoryRemembered,
    RecallRequest,
    Scope,
    TurnRecorded,
)

SCOPE = Scope(tenant="acme", user_id="alice", agent_id="travel-bot")

# Argument model -> the contract it mirrors, and the fields it deliberately narrows.
MIRRORS: list[tuple[type[BaseModel], type[BaseModel], set[str]]] = [
    (RememberArguments, MemoryRemembered, set()),
    (RecallArguments, RecallRequest, {"search_scope"}),
    (ForgetArguments, MemoryForgotten, set()),
    (RecordTurnArguments, TurnRecorded, set()),
    (ListMemoriesArguments, ListMemoriesRequest, {"search_scope", "categories"}),
    (MemoryHistoryArguments, MemoryForgotten, set()),
]


def field_schema(model: type[BaseModel], name: str) -> dict[str, Any]:
    """Return a field's JSON Schema without what only documents it (its description)."""
    schema = json_schema(model)["properties"][name]
    return {k: v for k, v in schema.items() if k != "description"}


@pytest.mark.parametrize(("arguments", "contract", "narrowed"), MIRRORS)
def test_argument_fields_have_their_contracts_types_bounds_and_defaults(
    arguments: type[BaseModel], contract: type[BaseModel], narrowed: set[str]
) -> None:
    """Each argument shared with the contract validates as the contract's field does."""
    shared = (set(arguments.model_fields) & set(contract.model_fields)) - narrowed

    assert set(arguments.model_fields) - narrowed == shared
    for name in sorted(shared):
        assert field_schema(contract, name) == field_schema(arguments, name), name


def test_no_tool_schema_lets_a_model_name_a_scope() -> None:
    """No tool takes a tenant, user, agent or session, and none accepts unknown arguments."""
    for tool in TOOLS.values():
        schema = input_schema(tool)

        assert set() == SCOPE_ARGUMENTS & set(schema["properties"]), tool.name
        assert False is schema["additionalProperties"], tool.name


def test_no_tool_can_search_the_whole_tenant() -> None:
    """The search scopes a tool offers stop at this user: 'global' would cross users."""
    for tool in (TOOLS["recall"], TOOLS["list_memories"]):
        assert ["agent", "user"] == input_schema(tool)["properties"]["search_scope"]["enum"]


def test_openai_and_anthropic_definitions_carry_the_same_schemas() -> None:
    """Both formats list the six tools with one description and one schema each."""
    openai, anthropic = tool_schemas("openai"), tool_schemas("anthropic")

    names = ["recall", "remember", "forget", "record_turn", "list_memories", "memory_history"]
    assert names == [t["function"]["name"] for t in openai]
    assert names == [t["name"] for t in anthropic]
    for as_openai, as_anthropic in zip(openai, anthropic, strict=True):
        assert "function" == as_openai["type"]
        assert as_anthropic["input_schema"] == as_openai["function"]["parameters"]
        assert as_anthropic["description"] == as_openai["function"]["description"]


def test_schemas_are_self_contained() -> None:
    """Enums are inlined: no ``$ref`` or ``$defs`` that a provider might not resolve."""
    text = str(tool_schemas("anthropic"))

    assert "$ref" not in text
    assert "$defs" not in text
    assert ["core", "daily", "conversation", "custom"] == (
        input_schema(TOOLS["remember"])["properties"]["category"]["enum"]
    )


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("recall", {"query": "diet", "max_tokens": -5}, "recall: max_tokens: Input should be"),
        ("remember", {"content": ""}, "remember: content: String should have at least 1"),
        ("forget", {}, "forget: Value error, give exactly one of memory_id or key"),
        ("record_turn", {"query": " ", "response": ""}, "a turn needs a query or a response"),
        ("recall", {"query": "diet", "colour": "red"}, "colour: Extra inputs are not permitted"),
        ("recall", "{not json", "arguments are not valid JSON"),
        ("recall", "[1, 2]", "arguments must be a JSON object"),
        ("summon", {}, "unknown tool 'summon'; the tools are: recall, remember"),
    ],
)
def test_bad_input_is_refused_with_what_to_fix(name: str, arguments: Any, expected: str) -> None:
    """A bad call raises ToolCallError whose message names the tool, the field and the rule."""
    with pytest.raises(ToolCallError) as refused:
        parse_arguments(name, arguments)

    assert expected in str(refused.value)


@pytest.mark.parametrize("argument", sorted(SCOPE_ARGUMENTS))
def test_a_scope_argument_is_refused_not_ignored(argument: str) -> None:
    """Naming a tenant, user, agent or session in a call is refused with the reason."""
    with pytest.raises(ToolCallError) as refused:
        parse_arguments("recall", {"query": "secrets", argument: "someone-else"})

    assert str(refused.value).startswith(f"{argument}: whose memory a call reads or writes")


def test_arguments_may_come_as_openai_sends_them() -> None:
    """A JSON string (OpenAI) parses like an object (Anthropic)."""
    tool, parsed = parse_arguments("forget", json.dumps({"memory_id": str(uuid.UUID(int=7))}))

    assert "forget" == tool.name
    assert ForgetArguments(memory_id=uuid.UUID(int=7)) == parsed


class RecordingClient:
    """Stands in for MemoryClient: records what a tool asked of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Scope]] = []

    async def remember(self, scope: Scope, content: str, **_: Any) -> uuid.UUID:
        self.calls.append(("remember", scope))
        return uuid.UUID(int=1)


async def test_a_refused_call_reaches_no_client_method() -> None:
    """Bad input publishes nothing: the client is not called."""
    client = RecordingClient()

    with pytest.raises(ToolCallError):
        await execute_tool_call(client, SCOPE, "remember", {"content": "", "tenant": "x"})  # type: ignore[arg-type]

    assert [] == client.calls


async def test_a_call_runs_in_the_scope_the_caller_bound() -> None:
    """The client is asked in the bound scope, and the result is JSON-ready."""
    client = RecordingClient()

    result = await execute_tool_call(client, SCOPE, "remember", {"content": "vegan", "key": "diet"})  # type: ignore[arg-type]

    assert [("remember", SCOPE)] == client.calls
    assert {"memory_id": str(uuid.UUID(int=1)), "key": "diet"} == result
