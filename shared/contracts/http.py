"""The HTTP API's own bodies: its error body and what a write answers.

Everything else the API takes and answers is a contract of its own (``RecallOptions``,
``RecallResponse``, ``MemoryList``, the memory events, ``MemoryUpdated``): one source of truth.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from memoryd.shared.contracts.events import MemoryForgotten, MemoryRemembered, SessionEnded
from memoryd.shared.contracts.recall import RecallErrorCode
from memoryd.shared.contracts.retrieval import MemoryExpired

# The recall service's codes (``RecallError``), and those only an HTTP caller can meet.
HttpErrorCode = Literal[RecallErrorCode, "unauthorized", "forbidden", "not_found", "unavailable"]


class ErrorBody(BaseModel):
    """Why a request failed: a code a program can branch on, and a message for a person."""

    model_config = ConfigDict(frozen=True)

    code: HttpErrorCode
    message: str


class TurnAccepted(BaseModel):
    """A turn is in the log; the workers file it shortly."""

    model_config = ConfigDict(frozen=True)

    turn_id: uuid.UUID


class MemoryAccepted(BaseModel):
    """A memory is in the log under this id (the key's, when it has one)."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    key: str | None


class ForgetAccepted(BaseModel):
    """A forget is in the log, for the memory named by id or by key."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID | None
    key: str | None


MemoryVersion = Annotated[
    MemoryRemembered | MemoryForgotten | MemoryExpired | SessionEnded,
    Field(discriminator="type"),
]


class MemoryHistory(BaseModel):
    """Every event that made or ended one memory, in log order."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    versions: list[MemoryVersion]
