"""memoryd as tools for a model: the argument models, their JSON schemas, and the executor.

One definition serves every interface: the MCP server lists these tools with these input
schemas, ``memoryd tools --format openai|anthropic`` prints them for function calling, and
``execute_tool_call`` runs a call a model made against a ``MemoryClient``.

The argument models mirror the contracts' fields (``MemoryRemembered``, ``RecallRequest``,
``TurnRecorded``, ``MemoryForgotten``, ``ListMemoriesRequest``: the same types, bounds and
defaults, checked by tests/unit/test_tools.py) WITHOUT the scope: tenant, user and agent are
bound by the caller of ``execute_tool_call`` (the app, or the MCP server from its settings or
the caller's token), never by the model. A call that names a scope field is refused, not
ignored, so a prompt-injected model learns that it cannot choose whose memory it reads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from memoryd.shared.client.client import MemoryClient
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.events import (
    MAX_TEXT_CHARS,
    Category,
    MemoryKey,
    MemoryRemembered,
    MemoryType,
    OptionalText,
    Text,
)
from memoryd.shared.contracts.memories import MAX_LISTED, StoredMemory
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.domain.memories import MemoryEvent

# The scope's fields, and the names a model may try for them: refused with a clear reason.
SCOPE_ARGUMENTS = frozenset(
    {"scope", "tenant", "tenant_id", "user", "user_id", "agent", "agent_id", "namespace"}
    | {"session", "session_id"}
)
# How far a tool may look: this user with this agent, or this user with every agent. The
# whole tenant ("global") would cross users, so no tool offers it.
ToolSearchScope = Literal["agent", "user"]
Format = Literal["openai", "anthropic"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic")


class ToolCallError(ValueError):
    """A tool call the model got wrong (unknown tool, bad arguments): nothing was done.

    The message says what to fix; hand it back to the model as the tool's error result.
    """


class _Arguments(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RememberArguments(_Arguments):
    """Store one explicit memory."""

    content: Text = Field(
        description="The fact to keep, as one self-contained sentence "
        "(e.g. 'Alice is vegetarian and allergic to peanuts')."
    )
    key: MemoryKey | None = Field(
        default=None,
        description="A short stable name for the fact (e.g. 'diet', 'home_city'). Remembering "
        "the same key again replaces the old value; leave it out for a one-off fact.",
    )
    category: Category = Field(
        default=Category.CORE,
        description="How long it lives: 'core' (never expires), 'daily' (expires after 30 "
        "days), 'conversation' (cleared when this session ends), 'custom'.",
    )
    memory_type: MemoryType = Field(
        default=MemoryType.SEMANTIC,
        description="'semantic' (a fact or preference), 'episodic' (something that happened), "
        "'procedural' (how the user wants something done).",
    )
    importance: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="0 to 1: how much this should weigh when recalled.",
    )
    evergreen: bool = Field(
        default=False, description="True if the fact does not grow stale with time."
    )


class RecallArguments(_Arguments):
    """Ask for the memory context of a query."""

    query: str = Field(
        default="",
        max_length=MAX_TEXT_CHARS,
        description="What you need to know, in words (e.g. 'what does the user eat?'). Empty: "
        "the recent conversation and the most important memories.",
    )
    max_tokens: int = Field(
        default=2_000,
        ge=1,
        le=200_000,
        description="The token budget of the returned context block.",
    )
    limit: int = Field(default=10, ge=1, le=100, description="At most this many memories.")
    search_scope: ToolSearchScope = Field(
        default="agent",
        description="'agent': what this user told you (default); 'user': what this user told "
        "any agent.",
    )


class ForgetArguments(_Arguments):
    """Forget one memory, by id or by key."""

    memory_id: uuid.UUID | None = Field(
        default=None, description="The memory's id, from remember, recall or list_memories."
    )
    key: MemoryKey | None = Field(default=None, description="The memory's key.")

    @model_validator(mode="after")
    def _names_one_memory(self) -> ForgetArguments:
        if (self.memory_id is None) == (self.key is None):
            raise ValueError("give exactly one of memory_id or key")
        return self


class RecordTurnArguments(_Arguments):
    """Record one exchange of the conversation."""

    query: OptionalText = Field(description="What the user said, verbatim.")
    response: OptionalText = Field(description="What you answered, verbatim.")

    @model_validator(mode="after")
    def _has_text(self) -> RecordTurnArguments:
        if not (self.query.strip() or self.response.strip()):
            raise ValueError("a turn needs a query or a response")
        return self


class ListMemoriesArguments(_Arguments):
    """List the explicit memories kept."""

    categories: list[Category] | None = Field(
        default=None, min_length=1, description="Only these categories (default: all)."
    )
    limit: int = Field(default=50, ge=1, le=MAX_LISTED, description="At most this many.")
    offset: int = Field(default=0, ge=0, description="Skip this many (for the next page).")
    search_scope: ToolSearchScope = Field(
        default="agent",
        description="'agent': the memories of this user with you (default); 'user': with any "
        "agent.",
    )


class MemoryHistoryArguments(_Arguments):
    """Show every version of one memory."""

    memory_id: uuid.UUID | None = Field(default=None, description="The memory's id.")
    key: MemoryKey | None = Field(default=None, description="The memory's key.")

    @model_validator(mode="after")
    def _names_one_memory(self) -> MemoryHistoryArguments:
        if (self.memory_id is None) == (self.key is None):
            raise ValueError("give exactly one of memory_id or key")
        return self


# --- what each tool does (thin: the client does the work) ---------------------------------
def _memory_summary(memory: StoredMemory) -> dict[str, Any]:
    return memory.model_dump(
        mode="json",
        include={"memory_id", "key", "content", "category", "memory_type", "importance"}
        | {"updated_at", "expires_at"},
    )


def _version(event: MemoryEvent) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "event": event.type.removeprefix("memory.").removesuffix(".v1"),
        "event_id": str(event.event_id),
        "occurred_at": event.occurred_at.isoformat(),
    }
    if isinstance(event, MemoryRemembered):
        entry |= event.model_dump(
            mode="json", include={"key", "content", "category", "memory_type", "importance"}
        )
    return entry


async def _remember(client: MemoryClient, scope: Scope, args: RememberArguments) -> dict[str, Any]:
    memory_id = await client.remember(
        scope,
        args.content,
        key=args.key,
        category=args.category,
        memory_type=args.memory_type,
        importance=args.importance,
        evergreen=args.evergreen,
    )
    return {"memory_id": str(memory_id), "key": args.key}


async def _recall(client: MemoryClient, scope: Scope, args: RecallArguments) -> dict[str, Any]:
    answer = await client.recall(
        scope,
        args.query,
        search_scope=SearchScope(args.search_scope),
        limit=args.limit,
        max_tokens=args.max_tokens,
    )
    memories = [
        m.model_dump(mode="json", include={"memory_id", "key", "content", "category"})
        for m in answer.memories
    ]
    return {"context": answer.context, "tokens": answer.tokens, "memories": memories}


async def _forget(client: MemoryClient, scope: Scope, args: ForgetArguments) -> dict[str, Any]:
    await client.forget(scope, memory_id=args.memory_id, key=args.key)
    named = {"memory_id": str(args.memory_id)} if args.memory_id else {"key": args.key}
    return {"forgotten": named}


async def _record_turn(
    client: MemoryClient, scope: Scope, args: RecordTurnArguments
) -> dict[str, Any]:
    turn_id = await client.record_turn(scope, args.query, args.response)
    return {"turn_id": str(turn_id)}


async def _list_memories(
    client: MemoryClient, scope: Scope, args: ListMemoriesArguments
) -> dict[str, Any]:
    page = await client.list_memories(
        scope,
        search_scope=SearchScope(args.search_scope),
        categories=args.categories,
        limit=args.limit,
        offset=args.offset,
    )
    return {"total": page.total, "memories": [_memory_summary(m) for m in page.memories]}


async def _memory_history(
    client: MemoryClient, scope: Scope, args: MemoryHistoryArguments
) -> dict[str, Any]:
    events = await client.memory_history(scope, memory_id=args.memory_id, key=args.key)
    return {"versions": [_version(event) for event in events]}


A = TypeVar("A", bound=_Arguments)


@dataclass(frozen=True)
class Tool(Generic[A]):
    """One tool: its name, what a model reads to choose it, its arguments, what it does."""

    name: str
    description: str
    arguments: type[A]
    run: Callable[[MemoryClient, Scope, A], Awaitable[dict[str, Any]]]
    read_only: bool = False
    destructive: bool = False


TOOLS: dict[str, Tool[Any]] = {
    tool.name: tool
    for tool in (
        Tool(
            "recall",
            "Look up what you know about this user before you answer. Returns `context`, one "
            "prompt-ready block of the memories, the recent conversation and related past "
            "exchanges that match `query`, within `max_tokens`, plus the matching memories "
            "with their ids. Call it at the start of a task and whenever the user refers to "
            "something from before ('as I said', 'my usual').",
            RecallArguments,
            _recall,
            read_only=True,
        ),
        Tool(
            "remember",
            "Store a lasting fact about this user: a preference, a decision, a detail they "
            "asked you to keep. Give it a short `key` when the fact may change (remembering "
            "the key again replaces the old value). Returns the memory's id. Do not store "
            "whole exchanges here: record_turn keeps the conversation.",
            RememberArguments,
            _remember,
        ),
        Tool(
            "forget",
            "Delete one memory, by `memory_id` (from remember, recall or list_memories) or by "
            "`key`. Use it when the user asks you to forget something or a stored fact is "
            "wrong; to change a fact, remember its key again instead.",
            ForgetArguments,
            _forget,
            destructive=True,
        ),
        Tool(
            "record_turn",
            "Save one exchange of this conversation (what the user said, what you answered) "
            "to long-term memory, so later recalls can find it. Call it once per turn, after "
            "you answer.",
            RecordTurnArguments,
            _record_turn,
        ),
        Tool(
            "list_memories",
            "List the explicit memories kept about this user, most recently changed first, "
            "with ids, keys and categories, and `total`. Use it to review or audit what is "
            "kept (page with `offset`); to answer a question, use recall.",
            ListMemoriesArguments,
            _list_memories,
            read_only=True,
        ),
        Tool(
            "memory_history",
            "Show every version of one memory, oldest first: each time it was stored or "
            "changed (with its content then), and when it was forgotten, expired or cleared "
            "with its session. Name it by `memory_id` or by `key`.",
            MemoryHistoryArguments,
            _memory_history,
            read_only=True,
        ),
    )
}


# --- schemas ---------------------------------------------------------------------------------
def _inlined(node: Any, definitions: Mapping[str, Any]) -> Any:
    """Return ``node`` with every ``$ref`` to ``definitions`` replaced and titles dropped."""
    if isinstance(node, list):
        return [_inlined(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    reference = node.get("$ref")
    merged = dict(node)
    if isinstance(reference, str):
        del merged["$ref"]
        merged = {**definitions[reference.rsplit("/", 1)[-1]], **merged}
    return {
        key: _inlined(value, definitions)
        for key, value in merged.items()
        if key != "$defs" and not (key == "title" and isinstance(value, str))
    }


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Return a model's JSON Schema, self-contained (no ``$ref``) and without titles."""
    schema = model.model_json_schema()
    schema.pop("description", None)  # the model's docstring: a tool's description says more
    inlined: dict[str, Any] = _inlined(schema, schema.get("$defs", {}))
    return inlined


def input_schema(tool: Tool[Any]) -> dict[str, Any]:
    """Return the JSON Schema of a tool's arguments, as every interface lists it."""
    return json_schema(tool.arguments)


def tool_schemas(format: Format) -> list[dict[str, Any]]:
    """Return every tool as OpenAI function-calling or Anthropic tool-use definitions."""
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": input_schema(tool),
                },
            }
            for tool in TOOLS.values()
        ]
    return [
        {"name": tool.name, "description": tool.description, "input_schema": input_schema(tool)}
        for tool in TOOLS.values()
    ]


# --- running a call ------------------------------------------------------------------------
def _as_mapping(arguments: Mapping[str, Any] | str | None) -> Mapping[str, Any]:
    """Return the arguments as a mapping (OpenAI sends a JSON string, Anthropic an object)."""
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as error:
            raise ToolCallError(f"arguments are not valid JSON: {error.msg}") from None
    if not isinstance(arguments, Mapping):
        raise ToolCallError("arguments must be a JSON object")
    return arguments


def parse_arguments(name: str, arguments: Mapping[str, Any] | str | None) -> tuple[Tool[Any], Any]:
    """Return the tool ``name`` and its validated arguments; ``ToolCallError`` if either is bad."""
    tool = TOOLS.get(name)
    if tool is None:
        raise ToolCallError(f"unknown tool {name!r}; the tools are: {', '.join(TOOLS)}")
    given = _as_mapping(arguments)
    scoped = sorted(SCOPE_ARGUMENTS & set(given))
    if scoped:
        raise ToolCallError(
            f"{', '.join(scoped)}: whose memory a call reads or writes is fixed by the server "
            "(tenant, user and agent come from its configuration or your credentials); "
            "leave these arguments out"
        )
    try:
        return tool, tool.arguments.model_validate(given)
    except ValidationError as error:
        raise ToolCallError(f"{name}: {describe_validation_error(error)}") from None


async def execute_tool_call(
    client: MemoryClient,
    scope: Scope,
    name: str,
    arguments: Mapping[str, Any] | str | None,
) -> dict[str, Any]:
    """Run the tool call ``name(arguments)`` in ``scope``; return its JSON-ready result.

    ``scope`` is the caller's to bind (the user the app serves); ``arguments`` is what the
    model sent, a JSON string or an object. Bad input raises ``ToolCallError`` before anything
    is published; hand its message back to the model as the tool's error.
    """
    tool, parsed = parse_arguments(name, arguments)
    return await tool.run(client, scope, parsed)
