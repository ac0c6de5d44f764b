"""The memoryd client SDK."""

from memoryd.shared.client.client import MemoryClient, RecallFailed

__all__ = ["MemoryClient", "RecallFailed"]
