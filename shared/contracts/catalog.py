"""The catalogue of every event the log can hold, and its (de)serialisation.

Adding an event type: define it (a frozen ``Event`` subclass with a versioned ``type``), add it
to ``AnyEvent`` and ``EVENT_TYPES`` below, and run ``memoryd schemas``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import Field, TypeAdapter, ValidationError

from memoryd.shared.contracts.events import (
    NUL_FREE,
    WIRE,
    Event,
    MemoryForgotten,
    MemoryRemembered,
    PageEvicted,
    SessionEnded,
    TurnRecorded,
    UserErased,
    type_name,
)

# --- MemoryOS tiers ---
from memoryd.shared.contracts.memoryos import (
    MEMORYOS_EVENTS,
    LlmStepFailed,
    PageChained,
    PageFiled,
    PersonaExtracted,
    SegmentEvicted,
    SegmentPromoted,
    SegmentSummarised,
    SegmentsVisited,
)

MemoryOsEvent = (
    PageChained
    | PageFiled
    | SegmentSummarised
    | SegmentPromoted
    | SegmentEvicted
    | SegmentsVisited
    | PersonaExtracted
    | LlmStepFailed
)

# --- hybrid retrieval ---
from memoryd.shared.contracts.retrieval import (  # noqa: E402 (kept in its own block)
    GraphExtracted,
    MemoriesRecalled,
    MemoryExpired,
)

RetrievalEvent = MemoriesRecalled | MemoryExpired | GraphExtracted
RETRIEVAL_EVENTS: tuple[type[Event], ...] = (MemoriesRecalled, MemoryExpired, GraphExtracted)

AnyEvent = Annotated[
    TurnRecorded
    | MemoryRemembered
    | MemoryForgotten
    | SessionEnded
    | UserErased
    | PageEvicted
    | MemoryOsEvent
    | RetrievalEvent,
    Field(discriminator="type"),
]

EVENT_TYPES: tuple[type[Event], ...] = (
    TurnRecorded,
    MemoryRemembered,
    MemoryForgotten,
    SessionEnded,
    UserErased,
    PageEvicted,
    *MEMORYOS_EVENTS,
    *RETRIEVAL_EVENTS,
)

event_adapter: TypeAdapter[AnyEvent] = TypeAdapter(AnyEvent)


def decode_event(data: bytes) -> AnyEvent:
    """Parse and validate one event from its JSON bytes (raises pydantic.ValidationError).

    The wire rules apply: the bytes must carry ``event_id`` (a Python constructor may leave it
    to its default, a log message may not), so every projection knows the event by one id.
    """
    context = {WIRE: True, NUL_FREE: b"\\u0000" not in data}
    return event_adapter.validate_json(data, context=context)


def decode_valid(messages: Iterable[bytes]) -> list[AnyEvent]:
    """Decode the messages that are valid events, in order; leave out what the workers
    dead-letter (it never reached a read model)."""
    events: list[AnyEvent] = []
    for data in messages:
        try:
            events.append(decode_event(data))
        except ValidationError:
            continue
    return events


def encode_event(event: Event) -> bytes:
    """Serialise an event to the JSON bytes written to the log."""
    return event.model_dump_json().encode()


def event_type_name(event: Event) -> str:
    """Return the versioned type string of an event."""
    return type_name(type(event))
