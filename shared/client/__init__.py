"""The memoryd client SDK."""

from memoryd.shared.adapters.nats_log import NatsUnavailable, PublishFailed
from memoryd.shared.client.client import MemoryClient, RecallFailed, RecallOverloaded

__all__ = ["MemoryClient", "NatsUnavailable", "PublishFailed", "RecallFailed", "RecallOverloaded"]
