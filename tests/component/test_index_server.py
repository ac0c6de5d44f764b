"""Tests for the qdrant-client index beyond the shared contract, in qdrant-client local mode.

Local mode cannot show three server behaviours, left to a run against a real server: payload
indexes (local mode accepts and ignores them, so `is_tenant` and the HNSW flags go unchecked),
background optimisation (local mode is always "green", so `optimize()` never has to wait),
and the refusal of an existing collection of another dimension (each ":memory:" client has
its own storage, so a second adapter cannot see the first one's collection).
"""

from uuid import uuid4

import pytest

from memoryd.shared.adapters.index import IndexPayload, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.server import QdrantServerIndex

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
ACME = ScopeFilter(tenant="acme")


def _point(i: int) -> IndexPoint:
    """Return the i-th point of a simple series."""
    payload = IndexPayload(tenant="acme", kind="fact", occurred_at=float(i))
    return IndexPoint(id=uuid4(), dense=[1.0, float(i)], text=f"fact {i}", payload=payload)


async def test_ensure_collection_twice_keeps_the_data() -> None:
    """Opening an existing collection again neither fails nor drops its points."""
    index = QdrantServerIndex(":memory:", 2)
    await index.ensure_collection()
    await index.upsert([_point(1)])
    await index.ensure_collection()
    count = await index.count(ACME)
    await index.close()
    assert 1 == count


async def test_upsert_larger_than_one_request_stores_every_point() -> None:
    """A bulk upsert split over several requests stores every point."""
    index = QdrantServerIndex(":memory:", 2)
    await index.ensure_collection()
    await index.upsert([_point(i) for i in range(1_100)])
    count = await index.count(ACME)
    window = await index.count(ScopeFilter(tenant="acme", occurred_after=1_000.0))
    await index.close()
    assert 1_100 == count
    assert 100 == window


async def test_optimize_returns_once_the_collection_is_idle() -> None:
    """optimize() returns when the collection reports no pending optimisation."""
    index = QdrantServerIndex(":memory:", 2, optimize_timeout=5.0)
    await index.ensure_collection()
    await index.upsert([_point(1)])
    await index.optimize()
    count = await index.count(ACME)
    await index.close()
    assert 1 == count
