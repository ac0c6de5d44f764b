"""Events as the workers decide them, built for tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.memoryos import PageFiled
from memoryd.shared.domain.memoryos import encode_vector, unit_vector

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def page_filed(
    n: int,
    *,
    user: str = "alice",
    segment: str | None = None,
    opened: bool = False,
    dimension: int = 384,
) -> PageFiled:
    """Return the n-th page of ``user`` (tenant acme, session s1), filed into ``segment``
    (default: the user's one segment, ``seg-<user>``), ``opened`` when it starts it; its
    vector is random from ``n``."""
    vector = unit_vector(np.random.default_rng(n).normal(size=dimension).astype(np.float32))
    return PageFiled(
        occurred_at=T0 + timedelta(minutes=n),
        scope=Scope(tenant="acme", user_id=user, session_id="s1"),
        cause_event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"evicted/{user}/{n}"),
        turn_id=uuid.uuid5(uuid.NAMESPACE_URL, f"turn/{user}/{n}"),
        segment_id=segment or f"seg-{user}",
        opened=opened,
        fscore=None,
        keywords=("bread",),
        vector=encode_vector(vector),
        query=f"q{n}",
        response=f"r{n}",
        turn_occurred_at=T0,
        embedder="test",
        decided_by="offline",
    )
