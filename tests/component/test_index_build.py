"""Tests for choosing the index backend with build_index."""

from pathlib import Path
from uuid import uuid4

import pytest

from memoryd.shared.adapters.index import (
    EdgeSearchIndex,
    IndexPayload,
    IndexPoint,
    ScopeFilter,
    build_index,
)
from memoryd.shared.adapters.index.server import QdrantServerIndex

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


async def test_without_url_the_index_is_edge_on_disk(tmp_path: Path) -> None:
    """No URL gives the embedded Edge index, stored under the given path."""
    index = build_index(None, tmp_path / "index", dimension=2)
    await index.ensure_collection()
    await index.close()
    assert isinstance(index, EdgeSearchIndex)
    assert (tmp_path / "index").is_dir()


async def test_with_url_the_index_is_a_server_client(tmp_path: Path) -> None:
    """A URL gives the qdrant-client index, which leaves the local path alone."""
    index = build_index(":memory:", tmp_path / "index", dimension=2, collection="c")
    await index.ensure_collection()
    payload = IndexPayload(tenant="acme", kind="turn", occurred_at=0.0)
    await index.upsert([IndexPoint(id=uuid4(), dense=[1.0, 0.0], text="x", payload=payload)])
    count = await index.count(ScopeFilter(tenant="acme"))
    await index.close()
    assert isinstance(index, QdrantServerIndex)
    assert 1 == count
    assert not (tmp_path / "index").exists()
