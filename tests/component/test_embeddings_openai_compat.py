"""Tests for OpenAIEmbedder against a stand-in OpenAI embeddings server on 127.0.0.1."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import openai
import pytest

from memoryd.shared.adapters.embeddings import EmbeddingDimensionError, OpenAIEmbedder

DIMENSION = 16


def raw_vector(text: str, dimension: int = DIMENSION) -> list[float]:
    """Return the stand-in's deterministic, deliberately unnormalised vector for `text`."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return (np.random.default_rng(seed).normal(size=dimension) * 3.0).tolist()


def unit(vector: list[float]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Return `vector` scaled to length one."""
    array = np.asarray(vector)
    return array / np.linalg.norm(array)


@dataclass
class StandIn:
    """What the stand-in server was asked, and what it should answer next."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    # One entry per coming request: an HTTP status to fail with, or "wide" for 1 extra dim.
    script: list[int | str] = field(default_factory=list)


def _handler_for(state: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append(body)
            step = state.script.pop(0) if state.script else None
            if self.path != "/v1/embeddings":
                self._send(404, {"error": {"message": "not found"}})
            elif isinstance(step, int):
                self._send(step, {"error": {"message": "scripted failure", "type": "server"}})
            elif "" in body["input"]:
                self._send(400, {"error": {"message": "'$.input' is invalid", "type": "invalid"}})
            else:
                self._send(200, _embeddings_reply(body, DIMENSION + (step == "wide")))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    return Handler


def _embeddings_reply(body: dict[str, Any], dimension: int) -> dict[str, Any]:
    """Answer in the OpenAI shape, listing the items in reverse as some servers do."""
    items = [
        {"object": "embedding", "index": i, "embedding": raw_vector(text, dimension)}
        for i, text in enumerate(body["input"])
    ]
    return {
        "object": "list",
        "data": items[::-1],
        "model": body["model"],
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    """Serve the stand-in on a free port for one test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = StandIn(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler_for(state)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


def embedder_for(stand_in: StandIn, **settings: Any) -> OpenAIEmbedder:
    """Point an OpenAIEmbedder at the stand-in with short timeouts."""
    defaults: dict[str, Any] = {"model": "stand-in-embed", "dimension": DIMENSION, "timeout": 5.0}
    return OpenAIEmbedder(base_url=stand_in.url, api_key="unused", **(defaults | settings))


async def test_vectors_are_normalised_and_in_input_order(stand_in: StandIn) -> None:
    """Rows follow the input order whatever order the server lists them in, at length one."""
    texts = ["alpha", "beta", "gamma"]

    vectors = await embedder_for(stand_in).embed(texts)

    assert ((3, DIMENSION), np.float32) == (vectors.shape, vectors.dtype)
    np.testing.assert_allclose([unit(raw_vector(text)) for text in texts], vectors, atol=1e-6)


async def test_texts_are_sent_in_batches(stand_in: StandIn) -> None:
    """Five texts at batch size two take three requests, and come back in order."""
    texts = ["a", "b", "c", "d", "e"]

    vectors = await embedder_for(stand_in, batch_size=2).embed(texts)

    assert [["a", "b"], ["c", "d"], ["e"]] == [request["input"] for request in stand_in.requests]
    assert ["stand-in-embed"] * 3 == [request["model"] for request in stand_in.requests]
    np.testing.assert_allclose([unit(raw_vector(text)) for text in texts], vectors, atol=1e-6)


async def test_a_server_error_is_retried(stand_in: StandIn) -> None:
    """A 500 is retried and the call still succeeds."""
    stand_in.script = [500]

    vectors = await embedder_for(stand_in, max_retries=2).embed(["retry me"])

    assert 2 == len(stand_in.requests)
    np.testing.assert_allclose([unit(raw_vector("retry me"))], vectors, atol=1e-6)


async def test_persistent_server_errors_surface_after_the_retries(stand_in: StandIn) -> None:
    """When every attempt fails, the error reaches the caller after 1 + max_retries tries."""
    stand_in.script = [500, 500, 500]

    with pytest.raises(openai.InternalServerError):
        await embedder_for(stand_in, max_retries=1).embed(["doomed"])

    assert 2 == len(stand_in.requests)


async def test_a_wrong_dimension_raises_a_clear_error(stand_in: StandIn) -> None:
    """An endpoint answering another width is refused, naming both widths."""
    stand_in.script = ["wide"]

    with pytest.raises(EmbeddingDimensionError, match=rf"\[{DIMENSION + 1}\].*{DIMENSION}"):
        await embedder_for(stand_in).embed(["too wide"])


async def test_an_empty_text_is_embedded_instead_of_rejected(stand_in: StandIn) -> None:
    """An empty turn does not fail the batch on endpoints that reject empty input."""
    vectors = await embedder_for(stand_in).embed(["", "not empty"])

    assert (2, DIMENSION) == vectors.shape
    assert [" ", "not empty"] == stand_in.requests[0]["input"]


async def test_empty_input_sends_no_request(stand_in: StandIn) -> None:
    """Embedding nothing costs no request."""
    vectors = await embedder_for(stand_in).embed([])

    assert ((0, DIMENSION), []) == (vectors.shape, stand_in.requests)
