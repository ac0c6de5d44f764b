"""Event contracts: the only things written to the log.

Events are frozen and versioned. A change of shape is a new class with a new ``type``
(``...v2``) plus an upcaster; an existing version is never edited in place.
"""

from __future__ import annotations

import functools
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    model_validator,
)

from memoryd.shared.contracts.scope import Scope

MAX_TEXT_CHARS = 32_000
MAX_KEY_CHARS = 200
MAX_METADATA_KEYS = 32

Text = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT_CHARS)]
OptionalText = Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)]
MemoryKey = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_KEY_CHARS)
]

# Derived event ids are uuid5 of their cause, so a re-derivation yields the same id and the
# stream's duplicate window (Nats-Msg-Id) drops the copy.
DERIVED_NAMESPACE = uuid.UUID("6f1c1a52-8a8e-4d55-9a55-1d0e3c6b7a10")


def derived_id(cause: uuid.UUID, purpose: str) -> uuid.UUID:
    """Return the deterministic id of an event derived from ``cause`` for ``purpose``."""
    return uuid.uuid5(DERIVED_NAMESPACE, f"{cause}:{purpose}")


class Category(StrEnum):
    """How long an explicit memory lives."""

    CORE = "core"  # never expires
    DAILY = "daily"  # expires after 30 days
    CONVERSATION = "conversation"  # cleared when its session ends
    CUSTOM = "custom"


class MemoryType(StrEnum):
    """What kind of knowledge an explicit memory holds."""

    SEMANTIC = "semantic"
    EPISODIC = "episodic"
    PROCEDURAL = "procedural"


# Decoding bytes from the log passes this validation context: on the wire every event must
# carry its ``event_id``, while a Python constructor may still leave it to the default.
WIRE = "wire"
# Set in that context when the JSON bytes hold no ``\u0000`` escape: JSON text carries a NUL
# only so (its parser refuses a raw control character), so no field can hold one and the
# walk of every value (``nul_path``, a third of decoding a turn) is skipped.
NUL_FREE = "nul_free"


def _wire_schema(schema: dict[str, Any]) -> None:
    """List ``event_id`` as required: a publisher that is not the SDK must send it."""
    required = schema.setdefault("required", [])
    if "event_id" not in required:
        required.insert(0, "event_id")


def nul_path(value: object, path: str = "") -> str | None:
    """Return where a NUL character hides in ``value`` (keys and nested values), else None."""
    if isinstance(value, str):
        return (path or "(text)") if "\x00" in value else None
    if isinstance(value, BaseModel):
        value = dict(value)
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and "\x00" in key:
                return f"{here} (a key)"
            found = nul_path(item, here)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            found = nul_path(item, f"{path}[{n}]")
            if found:
                return found
    return None


class Event(BaseModel):
    """Fields every event carries."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_wire_schema)

    # Required on the wire (see ``WIRE``): the one identity every projection uses. A publisher
    # sets the ``Nats-Msg-Id`` header to the same value, so the stream drops a re-publish.
    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    occurred_at: AwareDatetime
    scope: Scope

    @model_validator(mode="before")
    @classmethod
    def _wire_rules(cls, data: Any, info: ValidationInfo) -> Any:
        # PostgreSQL cannot store NUL in text (SQLite can): refuse it here, for every text
        # field, key and nested metadata string, so both databases see the same events.
        context = info.context if isinstance(info.context, dict) else {}
        where = None if context.get(NUL_FREE) else nul_path(data)
        if where is not None:
            raise ValueError(f"text must not contain NUL characters (\\u0000): {where}")
        wire = context.get(WIRE)
        if wire and isinstance(data, dict) and data.get("event_id") is None:
            raise ValueError(
                "event_id is required on the wire: set it (a UUID) and the Nats-Msg-Id "
                "header to the same value"
            )
        return data


@functools.cache  # asked for every event a worker or a replay decodes
def type_name(event_type: type[Event]) -> str:
    """Return the versioned ``type`` string of an event class (each concrete class fixes it)."""
    return str(event_type.model_fields["type"].default)


class TurnRecorded(Event):
    """A user query and the agent's response happened in a conversation."""

    type: Literal["turn.recorded.v1"] = "turn.recorded.v1"
    query: OptionalText
    response: OptionalText

    @model_validator(mode="after")
    def _has_text(self) -> TurnRecorded:
        if not (self.query.strip() or self.response.strip()):
            raise ValueError("a turn needs a query or a response")
        return self


class MemoryRemembered(Event):
    """An explicit memory was stored (or replaced: same key, same scope)."""

    type: Literal["memory.remembered.v1"] = "memory.remembered.v1"
    # Optional since keys became the identity: with a key, the service derives the id from
    # the scope and key (``domain.memories.memory_identity``) and ignores this one; without
    # a key it names the memory, and without either the event id does.
    memory_id: uuid.UUID | None = None
    key: MemoryKey | None = None
    content: Text
    category: Category = Category.CORE
    memory_type: MemoryType = MemoryType.SEMANTIC
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    evergreen: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict, max_length=MAX_METADATA_KEYS)


class MemoryForgotten(Event):
    """An explicit memory was forgotten, by id or by key."""

    type: Literal["memory.forgotten.v1"] = "memory.forgotten.v1"
    memory_id: uuid.UUID | None = None
    key: MemoryKey | None = None

    @model_validator(mode="after")
    def _names_a_memory(self) -> MemoryForgotten:
        if (self.memory_id is None) == (self.key is None):
            raise ValueError("forget needs exactly one of memory_id or key")
        return self


class SessionEnded(Event):
    """A conversation session ended; its conversation-category memories go."""

    type: Literal["session.ended.v1"] = "session.ended.v1"

    @model_validator(mode="after")
    def _has_session(self) -> SessionEnded:
        if self.scope.session_id is None:
            raise ValueError("session.ended needs scope.session_id")
        return self


class UserErased(Event):
    """A user's memory was erased (the right to be forgotten): the audit record, no content.

    It names the tenant and the user (the scope's other fields mean nothing here). Every
    projection folds it by deleting the user's rows, index points and graph; ``memoryd erase``
    publishes it and then purges the user's earlier events from the log, so it is the one
    event of the user's past that stays.
    """

    type: Literal["user.erased.v1"] = "user.erased.v1"


class PageEvicted(Event):
    """The oldest short-term page left the FIFO (derived by the STM worker)."""

    type: Literal["page.evicted.v1"] = "page.evicted.v1"
    cause_event_id: uuid.UUID
    turn_id: uuid.UUID
    query: OptionalText
    response: OptionalText
    turn_occurred_at: datetime
