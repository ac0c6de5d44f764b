"""The recall request-reply contract."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from memoryd.shared.contracts.events import MAX_TEXT_CHARS, Category, MemoryType
from memoryd.shared.contracts.scope import Scope, SearchScope


class RecallRequest(BaseModel):
    """Ask for the memory context that answers ``query`` for ``scope``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: Scope
    query: Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] = ""
    search_scope: SearchScope = SearchScope.AGENT
    limit: int = Field(default=10, ge=1, le=100)
    max_tokens: int = Field(default=2_000, ge=1, le=200_000)
    include_pages: bool = True


class PageItem(BaseModel):
    """A short-term dialogue page."""

    model_config = ConfigDict(frozen=True)

    turn_id: uuid.UUID
    session_id: str | None
    agent_id: str
    query: str
    response: str
    occurred_at: datetime


class MemoryItem(BaseModel):
    """An explicit memory that matched the query."""

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
    created_at: datetime
    score: float


class RecallResponse(BaseModel):
    """The memory context: pages, memories and the rendered, token-budgeted block."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[True] = True
    pages: list[PageItem]
    memories: list[MemoryItem]
    context: str
    tokens: int


class RecallError(BaseModel):
    """A request the service could not answer, with the reason."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[False] = False
    code: Literal["invalid_request", "internal"]
    message: str


RecallReply = Annotated[RecallResponse | RecallError, Field(discriminator="ok")]
