"""The memoryd client SDK."""

from memoryd.shared.adapters.nats_log import NatsUnavailable, PublishFailed
from memoryd.shared.client.client import (
    BrowseFailed,
    ListMemoriesFailed,
    MemoryClient,
    RecallFailed,
    RecallOverloaded,
)

__all__ = [
    "BrowseFailed",
    "ListMemoriesFailed",
    "MemoryClient",
    "NatsUnavailable",
    "PublishFailed",
    "RecallFailed",
    "RecallOverloaded",
]
