"""Recall's query model set to run apart from the documents' (``query_embedding_runtime``)."""

from __future__ import annotations

import pytest

from memoryd.services.bootstrap import build_model
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from memoryd.shared.settings import Settings
from tests.conftest import StackFactory, unique
from tests.fakes import CountingEmbedder

pytestmark = [pytest.mark.integration, pytest.mark.model]


async def test_int8_queries_search_the_documents_the_fp32_model_embedded(
    make_stack: StackFactory,
) -> None:
    """With queries on the int8 export, the documents' model embeds no question, and recall
    still finds the turn the question is about among unrelated ones."""
    documents = CountingEmbedder(build_model(Settings()))
    stack = await make_stack(changes={"query_embedding_runtime": "onnx-int8"}, embedder=documents)
    scope = Scope(tenant=unique("t"), user_id=unique("u"), session_id="s1")
    turns = [
        ("My sister Ana lives in Porto and teaches violin.", "Lovely!"),
        ("The dishwasher makes a grinding noise.", "Check the filter."),
        ("I am training for a half marathon in May.", "Good luck!"),
    ]
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        for query, response in turns:
            await client.record_turn(scope, query, response)
        await client.wait_until_applied(timeout=60)
        embedded = documents.texts
        answer = await client.recall(scope, "Which instrument does my sister teach?", limit=1)

    assert stack.retrieval is not None
    assert stack.retrieval.query_model.model_name.endswith("-int8")
    assert embedded == documents.texts  # the question went to the query model alone
    assert "violin" in answer.items[0].text
