"""Versioned contracts: events, recall and list-memories request-reply, notifications."""

from memoryd.shared.contracts.catalog import (
    EVENT_TYPES,
    AnyEvent,
    decode_event,
    encode_event,
)
from memoryd.shared.contracts.events import (
    Category,
    Event,
    MemoryForgotten,
    MemoryRemembered,
    MemoryType,
    PageEvicted,
    SessionEnded,
    TurnRecorded,
    UserErased,
    derived_id,
)
from memoryd.shared.contracts.memories import (
    ListMemoriesError,
    ListMemoriesRequest,
    MemoryList,
    StoredMemory,
)
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.contracts.recall import (
    MemoryItem,
    PageItem,
    RecallError,
    RecallReply,
    RecallRequest,
    RecallResponse,
)
from memoryd.shared.contracts.scope import Scope, SearchScope

__all__ = [
    "EVENT_TYPES",
    "AnyEvent",
    "Category",
    "Event",
    "ListMemoriesError",
    "ListMemoriesRequest",
    "MemoryForgotten",
    "MemoryItem",
    "MemoryList",
    "MemoryRemembered",
    "MemoryType",
    "MemoryUpdated",
    "PageEvicted",
    "PageItem",
    "RecallError",
    "RecallReply",
    "RecallRequest",
    "RecallResponse",
    "Scope",
    "SearchScope",
    "SessionEnded",
    "StoredMemory",
    "TurnRecorded",
    "UserErased",
    "decode_event",
    "derived_id",
    "encode_event",
]
