"""What every stored point holds beside its vectors, and how a scope reads: standard library only.

Both Qdrant adapters store points this way, and the Edge engine (``edge_engine``) computes a
point's digest where its shard is, in the index host, which imports nothing heavier.
"""

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

TEXT_KEY = "text"
# A digest of everything a point stores (see ``content_digest``); not a field of IndexPayload.
DIGEST_KEY = "digest"
TENANT_FIELD = "tenant"
TIME_FIELD = "occurred_at"
KEYWORD_FIELDS = (
    TENANT_FIELD,
    "user_id",
    "agent_id",
    "session_id",
    "namespace",
    "kind",
    "category",
    "memory_type",
)


@dataclass(frozen=True, slots=True)
class MatchAny:
    """The payload field must equal one of the values."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InRange:
    """The payload number must lie in ``[gte, lt)``; a None bound is open."""

    key: str
    gte: float | None
    lt: float | None


Condition = MatchAny | InRange


def point_key(point_id: UUID | str | int) -> UUID:
    """Return a point id as the UUID it is (the engine hands UUIDs back; others are parsed)."""
    return point_id if isinstance(point_id, UUID) else UUID(str(point_id))


def content_digest(payload: Mapping[str, Any], dense: bytes, encoding: str) -> str:
    """Return a digest of a point's payload (text included), dense vector and BM25 encoding.

    The dense vector counts by its float32 bytes: the same model on the same text gives the
    same digest; another model, or another export of it, a different one. The BM25 vector is
    a function of the text and ``encoding`` (``sparse.encoding``), so the two stand for it: a
    replay compares digests without encoding a text it will not write (~20 us a point).
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    digest.update(dense)
    digest.update(encoding.encode())
    return digest.hexdigest()
