"""The browse request-reply contract: everything memoryd holds of one user, tier by tier.

What the memory browser shows: the short-term pages, the mid-term segments with their heat,
the persona (profile, traits, knowledge, what the user wants from the agent), the explicit
memories and the knowledge graph with each relation's validity. Read-only, sent on the
tenant's own subject (``subjects.browse_subject``); the service refuses a request whose scope
names another tenant than the subject does, as it does for recall and list-memories.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memoryd.shared.contracts.memories import ListMemoriesError, StoredMemory
from memoryd.shared.contracts.recall import PageItem, ProfileItem, Provenance, TraitItem
from memoryd.shared.contracts.scope import Scope

MAX_BROWSED = 500


def _utc(value: datetime | None) -> datetime | None:
    # SQLite hands back naive datetimes for timezone-aware columns: they were stored in UTC.
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class BrowseRequest(BaseModel):
    """Ask for what memoryd holds of ``scope``'s user, across all their agents.

    ``limit`` bounds each list (segments, each segment's pages, memories, entities,
    relations); the newest, hottest or most mentioned come first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: Scope
    limit: int = Field(default=100, ge=1, le=MAX_BROWSED)


class SegmentPage(PageItem):
    """A dialogue page filed in a mid-term segment (its ``meta_chain`` is empty: a chain is
    kept only while its pages are in short-term memory)."""

    _in_utc = field_validator("occurred_at")(_utc)


class BrowsedSegment(BaseModel):
    """A mid-term topic segment: its summary and keywords, its heat now and what makes it."""

    model_config = ConfigDict(frozen=True)

    segment_id: str
    summary: str
    keywords: tuple[str, ...]
    heat: float = Field(description="alpha*visits + beta*interactions + gamma*recency, now")
    visits: int = Field(description="times recall used the segment (N_visit)")
    interactions: int = Field(description="pages filed since its last promotion (L_interaction)")
    promotions: int = Field(description="times it was promoted to the persona")
    page_count: int
    created_at: datetime
    last_visit_at: datetime
    pages: list[SegmentPage] = Field(description="its pages, newest first")


class LearnedItem(BaseModel):
    """A fact the persona learned about the user, or a trait the user wants in the agent."""

    model_config = ConfigDict(frozen=True)

    text: str
    learned_at: datetime
    provenance: Provenance


class GraphEntityView(BaseModel):
    """An entity of the user's knowledge graph, and how many of their items mention it."""

    model_config = ConfigDict(frozen=True)

    name: str
    entity_type: str
    first_seen_at: datetime
    mentions: int

    _in_utc = field_validator("first_seen_at")(_utc)


class GraphRelationView(BaseModel):
    """A relation of the user's knowledge graph with its validity.

    ``invalid_at`` is set when a later fact contradicted it (it is never deleted): it held
    from ``valid_at`` until then.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    relation: str
    target: str
    valid_at: datetime
    invalid_at: datetime | None
    item_id: uuid.UUID = Field(description="the turn or memory that stated it (its index item)")

    _in_utc = field_validator("valid_at", "invalid_at")(_utc)


class UserMemory(BaseModel):
    """Everything memoryd holds of one user, tier by tier, as of ``read_at``."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[True] = True
    tenant: str
    user_id: str
    read_at: datetime
    pages: list[PageItem] = Field(description="short-term pages of every agent, oldest first")
    segments: list[BrowsedSegment] = Field(description="mid-term segments, hottest first")
    profile: list[ProfileItem]
    traits: list[TraitItem]
    knowledge: list[LearnedItem] = Field(description="facts about the user, newest first")
    agent_traits: list[LearnedItem] = Field(description="wishes for the agent, newest first")
    memories: list[StoredMemory] = Field(description="explicit memories, newest change first")
    memory_count: int = Field(description="explicit memories in all (the list may stop short)")
    entities: list[GraphEntityView] = Field(description="most mentioned first")
    relations: list[GraphRelationView] = Field(description="newest first, ended ones too")


class BrowseError(ListMemoriesError):
    """A browse request the service refused or could not answer, with the reason.

    The shape (and the codes) of ``ListMemoriesError``: the same service refuses both alike.
    """


BrowseReply = Annotated[UserMemory | BrowseError, Field(discriminator="ok")]
