"""Derived events of the MemoryOS tiers: every decision of the LLM and embedding ports.

Vectors travel as base64 float32 (little-endian) strings, the domain's wire form, so replay
rebuilds segment means and fact rankings without calling the embedding model.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memoryd.shared.contracts.events import Event, OptionalText


class PageChained(Event):
    """A new STM page was checked for continuity and its chain summarised (meta chain)."""

    type: Literal["page.chained.v1"] = "page.chained.v1"
    turn_id: uuid.UUID
    linked: bool
    meta_chain: OptionalText
    decided_by: str

    @property
    def cause_event_id(self) -> uuid.UUID:
        """Return the event this decision is about, as other decisions name it: the turn."""
        return self.turn_id


class PageFiled(Event):
    """An evicted STM page was filed into an MTM segment (``opened``: it started the segment)."""

    type: Literal["page.filed.v1"] = "page.filed.v1"
    cause_event_id: uuid.UUID
    turn_id: uuid.UUID
    segment_id: str
    opened: bool
    fscore: float | None
    keywords: tuple[str, ...]
    vector: str = Field(description="base64 float32-le unit vector of the page")
    query: OptionalText
    response: OptionalText
    turn_occurred_at: datetime
    embedder: str
    decided_by: str


class SegmentSummarised(Event):
    """A segment's summary and keywords were rewritten after a page joined it."""

    type: Literal["segment.summarised.v1"] = "segment.summarised.v1"
    cause_event_id: uuid.UUID
    segment_id: str
    summary: OptionalText
    keywords: tuple[str, ...]
    decided_by: str


class PromotedPage(BaseModel):
    """A page handed to LPM with a promotion, with its provenance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_id: uuid.UUID
    session_id: str | None
    query: OptionalText
    response: OptionalText


class SegmentPromoted(Event):
    """A segment's heat passed tau: its new pages go to LPM, L_interaction resets."""

    type: Literal["segment.promoted.v1"] = "segment.promoted.v1"
    cause_event_id: uuid.UUID
    segment_id: str
    heat: float
    visits_at_promotion: int = Field(ge=0)
    pages: tuple[PromotedPage, ...]


class SegmentEvicted(Event):
    """The coldest segment of a user over capacity was dropped with its pages."""

    type: Literal["segment.evicted.v1"] = "segment.evicted.v1"
    cause_event_id: uuid.UUID
    segment_id: str
    heat: float


class SegmentsVisited(Event):
    """Recall used these segments (N_visit + visits and recency for each).

    ``visits`` counts the recalls that used each segment since the last such event (recall
    records visits per segment per interval, not per request); empty means one each.
    ``occurred_at`` is the last of those visits.
    """

    type: Literal["segments.visited.v1"] = "segments.visited.v1"
    segment_ids: tuple[str, ...] = Field(min_length=1)
    visits: tuple[Annotated[int, Field(ge=1)], ...] = ()

    @model_validator(mode="after")
    def _one_count_per_segment(self) -> SegmentsVisited:
        if self.visits and len(self.visits) != len(self.segment_ids):
            raise ValueError("visits needs one count per segment id")
        return self

    def counts(self) -> dict[str, int]:
        """Return the visits per segment id (without ``visits``, one per distinct id)."""
        if not self.visits:
            return dict.fromkeys(self.segment_ids, 1)
        counted: dict[str, int] = {}
        for segment_id, visits in zip(self.segment_ids, self.visits, strict=True):
            counted[segment_id] = counted.get(segment_id, 0) + visits
        return counted


class LearnedFact(BaseModel):
    """A fact about the user (attribute may be empty) or a trait of the agent, with its vector."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attribute: str = ""
    value: str = ""
    text: str
    vector: str = Field(description="base64 float32-le unit vector of the text")


class PersonaExtracted(Event):
    """What a promoted segment's pages say about the user and about the wished-for agent."""

    type: Literal["persona.extracted.v1"] = "persona.extracted.v1"
    cause_event_id: uuid.UUID
    segment_id: str
    profile: dict[str, str]
    facts: tuple[LearnedFact, ...]
    traits: dict[str, str]
    agent_traits: tuple[LearnedFact, ...]
    turn_ids: tuple[uuid.UUID, ...]
    session_ids: tuple[str, ...]
    embedder: str
    decided_by: str


class LlmStepFailed(Event):
    """An LLM step gave no usable answer; the worker went on with the offline extractor's."""

    type: Literal["llm.step_failed.v1"] = "llm.step_failed.v1"
    cause_event_id: uuid.UUID
    step: str
    reason: OptionalText
    attempts: int = Field(ge=0)
    fallback: str


MEMORYOS_EVENTS: tuple[type[Event], ...] = (
    PageChained,
    PageFiled,
    SegmentSummarised,
    SegmentPromoted,
    SegmentEvicted,
    SegmentsVisited,
    PersonaExtracted,
    LlmStepFailed,
)
