"""The list-memories request-reply contract: the explicit memories a scope holds, newest first.

Sent on the tenant's own subject (``subjects.list_memories_subject``); the service refuses a
request whose scope names another tenant than the subject does, so a NATS permission on the
subject is a permission on the tenant's memories.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memoryd.shared.contracts.events import Category, MemoryType
from memoryd.shared.contracts.scope import Scope, SearchScope

MAX_LISTED = 200


class ListMemoriesRequest(BaseModel):
    """Ask for the unexpired explicit memories visible to ``scope`` at ``search_scope``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: Scope
    search_scope: SearchScope = SearchScope.AGENT
    categories: tuple[Category, ...] | None = Field(default=None, min_length=1)
    limit: int = Field(default=50, ge=1, le=MAX_LISTED)
    offset: int = Field(default=0, ge=0)


class StoredMemory(BaseModel):
    """One explicit memory as the read model holds it (its latest version)."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    key: str | None
    content: str
    category: Category
    memory_type: MemoryType
    importance: float
    evergreen: bool
    metadata: dict[str, Any]
    user_id: str
    agent_id: str
    session_id: str | None
    namespace: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None

    @field_validator("created_at", "updated_at", "expires_at")
    @classmethod
    def _in_utc(cls, value: datetime | None) -> datetime | None:
        # SQLite hands back naive datetimes for timezone-aware columns: they were stored in UTC.
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class MemoryList(BaseModel):
    """A page of memories, most recently changed first, and how many there are in all."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[True] = True
    memories: list[StoredMemory]
    total: int


ListMemoriesErrorCode = Literal["invalid_request", "forbidden", "internal"]


class ListMemoriesError(BaseModel):
    """A list request the service refused or could not answer, with the reason."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[False] = False
    code: ListMemoriesErrorCode
    message: str


ListMemoriesReply = Annotated[MemoryList | ListMemoriesError, Field(discriminator="ok")]
