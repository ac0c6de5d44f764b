"""An OpenAI-compatible LLM that answers garbage or too late never stops the tier workers."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memoryd.services.bootstrap import ALL_COMPONENTS, start_stack
from memoryd.shared.adapters.llm import CircuitBreaker, OpenAIChatLlm
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, decode_event
from memoryd.shared.contracts.memoryos import LlmStepFailed, PageChained, PageFiled
from memoryd.shared.settings import Settings
from tests.conftest import _delete_streams, _reset_database, unique

pytestmark = [pytest.mark.integration, pytest.mark.model]

TIMEOUT = 0.3


def _completion(content: str) -> bytes:
    """Wrap an assistant message in the OpenAI chat completion shape."""
    return json.dumps(
        {
            "id": "chatcmpl-stand-in",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "stand-in",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


@pytest.fixture
def broken_llm_url() -> Iterator[tuple[str, list[str]]]:
    """Serve chat completions that alternate malformed JSON and answers past the timeout."""
    answers = itertools.cycle(["malformed", "slow"])
    served: list[str] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            """Answer badly, as scripted."""
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                answer = next(answers)
                served.append(answer)
            if answer == "slow":
                time.sleep(TIMEOUT * 3)
            data = _completion("{not json at all")
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", served
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


async def test_failed_llm_steps_are_recorded_and_the_offline_answer_is_used(
    settings: Settings, broken_llm_url: tuple[str, list[str]]
) -> None:
    """Malformed and late answers are retried, recorded as failures, and pages still file."""
    url, served = broken_llm_url
    tuned = settings.model_copy(update={"stm_capacity": 1})
    await _delete_streams(tuned.nats_url or "", tuned)
    await _reset_database(tuned)
    llm = OpenAIChatLlm(
        base_url=url,
        model="stand-in",
        timeout=TIMEOUT,
        attempts=2,
        base_delay=0.01,
        breaker=CircuitBreaker(failure_threshold=1_000),
    )
    stack = await start_stack(tuned, ALL_COMPONENTS, llm=llm)
    scope = Scope(tenant=unique("t"), user_id=unique("u"))
    try:
        async with await MemoryClient.connect(stack.nats_url, tuned.stream_name) as client:
            for i, query in enumerate(["I bake sourdough bread", "I moved to Lisbon"]):
                at = datetime(2026, 3, 2, tzinfo=UTC) + timedelta(minutes=i)
                await client.record_turn(scope, query, "Nice!", occurred_at=at)
            await client.wait_until_applied(timeout=60)
            answer = await client.recall(scope, "bread")
            info = await stack.js.stream_info(tuned.stream_name)
            events = [
                decode_event((await stack.js.get_msg(tuned.stream_name, seq)).data or b"")
                for seq in range(info.state.first_seq, info.state.last_seq + 1)
            ]
    finally:
        await stack.stop()
        await llm.aclose()
        await _delete_streams(tuned.nats_url or "", tuned)

    failures = [e for e in events if isinstance(e, LlmStepFailed)]
    filed = [e for e in events if isinstance(e, PageFiled)]
    chained = [e for e in events if isinstance(e, PageChained)]
    assert {"malformed", "slow"} <= set(served)
    assert {"check_continuity", "summarise_chain", "page_keywords", "summarise_segment"} <= {
        f.step for f in failures
    }
    assert all(2 == f.attempts for f in failures)
    assert ["I bake sourdough bread"] == [e.query for e in filed]
    assert 2 == len(chained)
    assert ["I moved to Lisbon"] == [page.query for page in answer.pages]
    assert "bread" in answer.memoryos.segments[0].keywords
