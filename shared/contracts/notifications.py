"""Memory-updated notifications: one versioned contract per kind, and their catalogue.

A worker publishes a notification after a read model changed. ``MemoryUpdated`` is the
envelope every kind shares; each kind is a subclass that fixes ``kind`` and ``version`` and
documents, as class attributes, the event types whose ``event_id`` it carries (``caused_by``),
the component that publishes it (``published_by``: a projection's consumer name) and what
its ``item_ids`` name (``holds``). ``NOTIFICATION_TYPES`` is the catalogue; ``memoryd
schemas`` exports each kind as ``schemas/notification.<kind>.v<version>.json``.

Versioning: the version travels in the payload, never in the subject or the kind, so the
subjects and kind strings subscribers filter on stay as they are. A notification without
``version`` (published before it existed) is version 1, and a subscriber that does not know
the field ignores it. Adding an optional field keeps a kind's version; any other change is a
new version of that kind (a new subclass with ``version: Literal[2]``). ``parse_notification``
refuses a version it does not know with a validation error naming ``version``: a
subscriber is told, never handed a shape it misreads.
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from memoryd.shared import subjects
from memoryd.shared.contracts.events import (
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
    type_name,
)
from memoryd.shared.contracts.memoryos import (
    PageFiled,
    PersonaExtracted,
    SegmentEvicted,
    SegmentPromoted,
)

NotificationKind = Literal[
    "page.added",
    "page.evicted",
    "memory.stored",
    "memory.forgotten",
    "session.cleared",
    # MemoryOS tiers
    "page.filed",
    "segment.promoted",
    "segment.evicted",
    "facts.learned",
    # every projection recall reads has applied the event (a turn, a memory, a forget)
    "recallable",
]


class ItemIds(StrEnum):
    """What every id in a notification's ``item_ids`` names."""

    TURNS = "turn ids"  # a turn.recorded event's event_id: the page, the turn in the index
    MEMORIES = "memory ids"  # an explicit memory's id (domain.memories.memory_identity)
    NONE = "none"  # always empty


def _document_kind(schema: dict[str, Any], model: type[Any]) -> None:
    """Add a kind's catalogue entry to its JSON Schema (the envelope has none).

    ``kind`` is listed as required: every notification on the wire carries it, and a
    subscriber dispatches on it. ``version`` is not: its absence means 1.
    """
    if model.caused_by:
        schema["required"] = ["kind", *schema.get("required", [])]
        schema["x-caused-by"] = [type_name(cause) for cause in model.caused_by]
        schema["x-published-by"] = model.published_by
        schema["x-subject"] = subjects.notify_subject_pattern(model.kind_name())


class MemoryUpdated(BaseModel):
    """Something in a user's memory changed, because of the event ``event_id``."""

    model_config = ConfigDict(frozen=True, json_schema_extra=_document_kind)

    kind: NotificationKind
    version: int = Field(
        default=1, ge=1, description="the kind's contract version (absent: 1, as published first)"
    )
    tenant: str
    user_id: str
    agent_id: str
    session_id: str | None
    event_id: uuid.UUID
    stream_seq: int = Field(
        description="the causing event's stream sequence; 0 for a derived event folded before "
        "the log gave it one"
    )
    item_ids: tuple[uuid.UUID, ...] = ()

    # The catalogue entry, set by each kind (the envelope itself is no kind).
    caused_by: ClassVar[tuple[type[Event], ...]] = ()
    published_by: ClassVar[str] = ""
    holds: ClassVar[ItemIds] = ItemIds.NONE

    @classmethod
    def kind_name(cls) -> str:
        """Return the kind this model fixes."""
        return str(cls.model_fields["kind"].default)

    @classmethod
    def contract_name(cls) -> str:
        """Return the kind and its version, e.g. ``page.added.v1``."""
        return f"{cls.kind_name()}.v{cls.model_fields['version'].default}"


class PageAddedNotification(MemoryUpdated):
    """A turn became the newest page of its conversation's short-term memory (STM)."""

    kind: Literal["page.added"] = "page.added"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(default=(), description="the page: the turn's id")

    caused_by = (TurnRecorded,)
    published_by = subjects.STM_CONSUMER
    holds = ItemIds.TURNS


class PageEvictedNotification(MemoryUpdated):
    """The turn ``event_id`` pushed the oldest page out of its conversation's STM FIFO.

    The same change is recorded in the log as ``page.evicted.v1``, which files the page into
    a mid-term segment (``page.filed``).
    """

    kind: Literal["page.evicted"] = "page.evicted"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="the evicted page: its turn's id"
    )

    caused_by = (TurnRecorded,)
    published_by = subjects.STM_CONSUMER
    holds = ItemIds.TURNS


class MemoryStoredNotification(MemoryUpdated):
    """An explicit memory was stored, or replaced one of the same key."""

    kind: Literal["memory.stored"] = "memory.stored"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="the memory's id (what remember returns)"
    )

    caused_by = (MemoryRemembered,)
    published_by = subjects.MEMORIES_CONSUMER
    holds = ItemIds.MEMORIES


class MemoryForgottenNotification(MemoryUpdated):
    """An explicit memory was forgotten (only published when one was removed)."""

    kind: Literal["memory.forgotten"] = "memory.forgotten"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="the ids of the memories removed"
    )

    caused_by = (MemoryForgotten,)
    published_by = subjects.MEMORIES_CONSUMER
    holds = ItemIds.MEMORIES


class SessionClearedNotification(MemoryUpdated):
    """A session ended: its conversation memories were cleared."""

    kind: Literal["session.cleared"] = "session.cleared"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="the ids of the conversation memories removed (may be empty)"
    )

    caused_by = (SessionEnded,)
    published_by = subjects.MEMORIES_CONSUMER
    holds = ItemIds.MEMORIES


class PageFiledNotification(MemoryUpdated):
    """An evicted page was filed into a mid-term topic segment (MTM).

    ``event_id`` is the ``page.filed.v1`` decision the MTM worker recorded on the page's
    ``page.evicted.v1``; ``stream_seq`` is 0.
    """

    kind: Literal["page.filed"] = "page.filed"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(default=(), description="the page: its turn's id")

    caused_by = (PageFiled,)
    published_by = subjects.MTM_CONSUMER
    holds = ItemIds.TURNS


class SegmentPromotedNotification(MemoryUpdated):
    """A mid-term segment ran hot and was promoted to the long-term persona (LPM).

    ``event_id`` is the ``segment.promoted.v1`` decision (its ``segment_id`` names the
    segment); ``stream_seq`` is 0.
    """

    kind: Literal["segment.promoted"] = "segment.promoted"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="empty: the segment is named in the segment.promoted event"
    )

    caused_by = (SegmentPromoted,)
    published_by = subjects.MTM_CONSUMER
    holds = ItemIds.NONE


class SegmentEvictedNotification(MemoryUpdated):
    """The coldest mid-term segment was evicted past the user's segment capacity.

    ``event_id`` is the ``segment.evicted.v1`` decision (its ``segment_id`` names the
    segment); ``stream_seq`` is 0.
    """

    kind: Literal["segment.evicted"] = "segment.evicted"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="empty: the segment is named in the segment.evicted event"
    )

    caused_by = (SegmentEvicted,)
    published_by = subjects.MTM_CONSUMER
    holds = ItemIds.NONE


class FactsLearnedNotification(MemoryUpdated):
    """A promotion taught the persona profile attributes or facts (none learned: none sent).

    ``event_id`` is the ``persona.extracted.v1`` decision; ``stream_seq`` is 0.
    """

    kind: Literal["facts.learned"] = "facts.learned"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="the turns of the promoted pages the facts come from"
    )

    caused_by = (PersonaExtracted,)
    published_by = subjects.PERSONA_CONSUMER
    holds = ItemIds.TURNS


class RecallableNotification(MemoryUpdated):
    """Every projection recall reads has applied the event ``event_id``: recall finds it.

    Published once per event, on a subject of its own that ends with the event id.
    """

    kind: Literal["recallable"] = "recallable"
    version: Literal[1] = 1
    item_ids: tuple[uuid.UUID, ...] = Field(
        default=(), description="a memory event: the memory's id; a turn: empty"
    )

    caused_by = (TurnRecorded, MemoryRemembered, MemoryForgotten)
    published_by = subjects.RECALLABLE_PUBLISHER
    holds = ItemIds.MEMORIES


NOTIFICATION_TYPES: tuple[type[MemoryUpdated], ...] = (
    PageAddedNotification,
    PageEvictedNotification,
    MemoryStoredNotification,
    MemoryForgottenNotification,
    SessionClearedNotification,
    PageFiledNotification,
    SegmentPromotedNotification,
    SegmentEvictedNotification,
    FactsLearnedNotification,
    RecallableNotification,
)

AnyNotification = Annotated[
    PageAddedNotification
    | PageEvictedNotification
    | MemoryStoredNotification
    | MemoryForgottenNotification
    | SessionClearedNotification
    | PageFiledNotification
    | SegmentPromotedNotification
    | SegmentEvictedNotification
    | FactsLearnedNotification
    | RecallableNotification,
    Field(discriminator="kind"),
]

notification_adapter: TypeAdapter[AnyNotification] = TypeAdapter(AnyNotification)

_BY_KIND: dict[str, type[MemoryUpdated]] = {
    model.kind_name(): model for model in NOTIFICATION_TYPES
}


def notification_type(kind: str) -> type[MemoryUpdated]:
    """Return the contract of ``kind``; the bare envelope for a kind the catalogue lacks.

    A kind missing from the catalogue is caught by the tests (the projections' notifications
    are checked against it); a worker never fails a batch over its documentation.
    """
    return _BY_KIND.get(kind, MemoryUpdated)


def parse_notification(data: bytes) -> AnyNotification:
    """Parse one notification into its kind's model (raises pydantic.ValidationError)."""
    return notification_adapter.validate_json(data)
