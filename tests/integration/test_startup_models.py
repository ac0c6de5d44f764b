"""start_stack loads and checks the embedding models before it returns."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from memoryd.services import bootstrap
from memoryd.services.bootstrap import EmbedderRole, start_stack
from memoryd.shared.adapters.embeddings import Embedder, OnnxEmbedder, Vectors
from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.settings import Settings, StartupError
from tests.component.test_embeddings_openai_compat import DIMENSION, StandIn, _handler_for
from tests.conftest import unique

pytestmark = pytest.mark.integration


class LazyModel:
    """A model that, like MiniLM, loads on its first embed; it counts its loads."""

    model_name = "lazy-stand-in"
    dimension = 8

    def __init__(self) -> None:
        self.loads = 0

    async def embed(self, texts: Sequence[str]) -> Vectors:
        if self.loads == 0:
            self.loads += 1
        rows = [
            np.frombuffer(hashlib.sha256(text.encode()).digest()[: self.dimension], np.uint8)
            for text in texts
        ]
        vectors = np.asarray(rows, dtype=np.float32) + 1.0
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    """Serve the OpenAI embeddings stand-in (16-dimensional vectors) on a free port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = StandIn(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler_for(state)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def _settings(nats_url: str, tmp_path: Path, **overrides: object) -> Settings:
    return Settings(
        data_dir=tmp_path,
        nats_url=nats_url,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}",
        log_format="console",
        **overrides,  # type: ignore[arg-type]
    )


async def test_the_query_model_is_loaded_before_start_returns(
    nats_url: str, tmp_path: Path
) -> None:
    """The recall service subscribes only once its model is loaded: no load at first recall."""
    model = LazyModel()
    stack = await start_stack(_settings(nats_url, tmp_path), ["recall"], embedder=model)
    try:
        assert 1 == model.loads  # loaded during start
        client = await MemoryClient.connect(stack.nats_url)
        await client.recall(Scope(tenant="warm", user_id=unique("u")), "anything at all?")
        await client.close()
        assert 1 == model.loads  # the first recall found it loaded
    finally:
        await stack.stop()


@pytest.mark.model
async def test_minilm_for_queries_is_loaded_when_start_returns(
    nats_url: str, tmp_path: Path
) -> None:
    """With the default local model, recall's MiniLM is in memory before start returns."""
    bootstrap._local_model.cache_clear()  # a fresh instance, not one an earlier test loaded
    stack = await start_stack(_settings(nats_url, tmp_path), ["recall"])
    try:
        assert stack.retrieval is not None
        query_model = stack.retrieval.query_model
        assert isinstance(query_model, OnnxEmbedder)
        assert query_model.loaded
    finally:
        await stack.stop()


async def test_an_endpoint_of_another_width_refuses_the_start(
    nats_url: str, tmp_path: Path, stand_in: StandIn
) -> None:
    """An OpenAI-compatible endpoint answering 16-dimensional vectors, configured for 384."""
    settings = _settings(
        nats_url,
        tmp_path,
        embedding_kind="openai",
        embedding_base_url=stand_in.url,
        embedding_model="stand-in-embed",
        embedding_dimension=384,
    )
    with pytest.raises(StartupError) as refused:
        stack = await start_stack(settings, ["recall"])
        await stack.stop()
    message = str(refused.value)
    assert "\n" not in message
    assert "MEMORYD_EMBEDDING_DIMENSION" in message
    assert f"[{DIMENSION}]" in message  # the width the endpoint sent


def _endpoint_settings(nats_url: str, tmp_path: Path, stand_in: StandIn) -> Settings:
    """Settings for the stand-in endpoint at its own width."""
    return _settings(
        nats_url,
        tmp_path,
        embedding_kind="openai",
        embedding_base_url=stand_in.url,
        embedding_model="stand-in-embed",
        embedding_dimension=DIMENSION,
    )


async def test_an_endpoint_of_the_configured_width_is_asked_at_start(
    nats_url: str, tmp_path: Path, stand_in: StandIn
) -> None:
    """A working endpoint of the right width starts, having answered once already."""
    settings = _endpoint_settings(nats_url, tmp_path, stand_in)
    stack = await start_stack(settings, ["recall"])
    await stack.stop()
    assert 1 == len(stand_in.requests)


async def test_an_endpoint_model_is_built_once_for_the_workers_and_opens_the_index(
    nats_url: str, tmp_path: Path, stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the bundled model is one instance a process: any other the workers use is built
    once at start, and the index opens at its width."""
    built: list[str] = []
    build = bootstrap.build_model

    def counted(settings: Settings, role: EmbedderRole = "workers") -> Embedder:
        built.append(role)
        return build(settings, role)

    monkeypatch.setattr(bootstrap, "build_model", counted)
    settings = _endpoint_settings(nats_url, tmp_path, stand_in)
    stack = await start_stack(settings, ["indexer", "recall"])
    try:
        assert stack.retrieval is not None
        where = ScopeFilter(tenant="t", user_id="u")
        # A vector of the endpoint's width is searched (another width would be refused).
        assert [] == await stack.retrieval.index.search_dense([0.25] * DIMENSION, where, 5)
    finally:
        await stack.stop()
    assert ["workers", "queries"] == built
