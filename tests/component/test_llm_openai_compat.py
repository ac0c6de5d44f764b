"""Tests for OpenAIChatLlm against a stand-in OpenAI chat server on 127.0.0.1."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memoryd.shared.adapters.llm import (
    CircuitBreaker,
    LlmFailure,
    OpenAIChatLlm,
    PageText,
    PersonaExtraction,
)
from memoryd.shared.adapters.llm.port import Fact

PAGE = PageText(query="I moved to Lisbon last month.", response="Welcome to Lisbon!")
TIMEOUT = 0.3
SLOW = 1.0
ATTEMPTS = 3
THRESHOLD = 2
COOLDOWN = 30.0
GOOD_KEYWORDS = json.dumps({"keywords": ["Lisbon", "moving", "lisbon"]})


@dataclass(frozen=True)
class Reply:
    """One scripted answer: the assistant's message text, an HTTP status, a delay."""

    content: str = GOOD_KEYWORDS
    status: int = 200
    delay: float = 0.0


@dataclass
class StandIn:
    """What the stand-in server was asked, and what it answers next."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    script: list[Reply] = field(default_factory=list)
    # Answered once the script runs out.
    otherwise: Reply = field(default_factory=Reply)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        """Record a request and pop the reply scripted for it."""
        with self.lock:
            self.requests.append(body)
            return self.script.pop(0) if self.script else self.otherwise


def _completion(content: str, model: str) -> dict[str, Any]:
    """Wrap an assistant message in the OpenAI chat completion shape."""
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _handler_for(state: StandIn) -> type[BaseHTTPRequestHandler]:
    """Make a request handler that answers from the stand-in's script."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            """Answer a chat completion as scripted."""
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": {"message": "not found"}})
                return
            reply = state.next_reply(body)
            time.sleep(reply.delay)
            if reply.status != 200:
                self._send(reply.status, {"error": {"message": "scripted", "type": "server"}})
            else:
                self._send(200, _completion(reply.content, body["model"]))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            """Write a JSON response; the client may have given up on a slow one."""
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

    return Handler


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    """Run a stand-in OpenAI chat server on a free port of 127.0.0.1."""
    state = StandIn()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        """Start at zero."""
        self.now = 0.0

    def __call__(self) -> float:
        """Return the current time."""
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    """Give the breaker a clock the test controls."""
    return FakeClock()


@pytest.fixture
async def llm(stand_in: StandIn, clock: FakeClock) -> AsyncIterator[OpenAIChatLlm]:
    """Build the adapter against the stand-in, with short timeouts and pauses."""
    breaker = CircuitBreaker(failure_threshold=THRESHOLD, cooldown=COOLDOWN, clock=clock)
    adapter = OpenAIChatLlm(
        base_url=stand_in.url,
        model="stand-in-model",
        timeout=TIMEOUT,
        attempts=ATTEMPTS,
        base_delay=0.01,
        max_delay=0.02,
        breaker=breaker,
    )
    yield adapter
    await adapter.aclose()


async def test_good_answer_is_parsed(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """A valid persona answer comes back as a PersonaExtraction, numbers read as text."""
    answer = {
        "profile": {"location": "Lisbon", "age": 34},
        "facts": [
            {"attribute": "location", "value": "Lisbon", "text": "The user lives in Lisbon."}
        ],
        "traits": {"travel_interest": "high: moved abroad"},
        "agent_traits": ["answer concisely"],
    }
    stand_in.script = [Reply(content=json.dumps(answer))]

    persona = await llm.extract_persona([PAGE])

    assert (
        PersonaExtraction(
            profile={"location": "Lisbon", "age": "34"},
            facts=(Fact(attribute="location", value="Lisbon", text="The user lives in Lisbon."),),
            traits={"travel_interest": "high: moved abroad"},
            agent_traits=("answer concisely",),
        )
        == persona
    )


async def test_request_names_the_model_and_asks_for_json(
    stand_in: StandIn, llm: OpenAIChatLlm
) -> None:
    """The endpoint is asked for the configured model in JSON mode."""
    await llm.page_keywords(PAGE)

    request = stand_in.requests[0]
    assert ("stand-in-model", {"type": "json_object"}) == (
        request["model"],
        request["response_format"],
    )


async def test_keywords_are_tidied(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """Keywords come back lowercase and without repeats, in the model's order."""
    keywords = await llm.page_keywords(PAGE)

    assert ["lisbon", "moving"] == keywords


async def test_invented_trait_ids_are_dropped(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """A trait id outside the 90 dimensions is not recorded."""
    answer = {"traits": {"travel_interest": "high", "love_of_lisbon": "high"}}
    stand_in.script = [Reply(content=json.dumps(answer))]

    persona = await llm.extract_persona([PAGE])

    assert {"travel_interest": "high"} == persona.traits


async def test_fenced_json_is_accepted(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """JSON wrapped in a Markdown code fence is still read, without a retry."""
    stand_in.script = [Reply(content='```json\n{"linked": true}\n```')]

    continuity = await llm.check_continuity(PAGE, PAGE)

    assert (True, 1) == (continuity.linked, len(stand_in.requests))


async def test_malformed_json_then_good_succeeds(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """A malformed answer is retried and the next good answer is used."""
    stand_in.script = [Reply(content="{not json"), Reply(content='{"summary": "Moving."}')]

    summary = await llm.summarise_chain([PAGE])

    assert ("Moving.", 2) == (summary, len(stand_in.requests))


async def test_schema_mismatch_then_good_succeeds(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """An answer of the wrong shape is retried like a malformed one."""
    stand_in.script = [
        Reply(content='{"keywords": "lisbon"}'),
        Reply(content='{"summary": "Lisbon", "keywords": ["lisbon"]}'),
    ]

    segment = await llm.summarise_segment("", [PAGE])

    assert ("Lisbon", ("lisbon",), 2) == (segment.summary, segment.keywords, len(stand_in.requests))


async def test_slow_answer_times_out_then_good_succeeds(
    stand_in: StandIn, llm: OpenAIChatLlm
) -> None:
    """An answer slower than the timeout is abandoned and the retry's answer used."""
    stand_in.script = [Reply(delay=SLOW)]
    started = time.monotonic()

    keywords = await llm.page_keywords(PAGE)

    assert (["lisbon", "moving"], 2) == (keywords, len(stand_in.requests))
    assert time.monotonic() - started < SLOW


async def test_server_error_then_good_succeeds(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """A 503 is retried and the next good answer is used."""
    stand_in.script = [Reply(status=503)]

    keywords = await llm.page_keywords(PAGE)

    assert (["lisbon", "moving"], 2) == (keywords, len(stand_in.requests))


async def test_always_malformed_fails_after_all_attempts(
    stand_in: StandIn, llm: OpenAIChatLlm
) -> None:
    """An endpoint that never answers valid JSON raises LlmFailure after N attempts."""
    stand_in.otherwise = Reply(content="Sure! Here are the keywords: lisbon")

    with pytest.raises(LlmFailure) as failure:
        await llm.page_keywords(PAGE)

    assert ("page_keywords", "malformed JSON", ATTEMPTS) == (
        failure.value.step,
        failure.value.reason,
        failure.value.attempts,
    )
    assert ATTEMPTS == len(stand_in.requests)


async def test_client_error_is_not_retried(stand_in: StandIn, llm: OpenAIChatLlm) -> None:
    """A 401 cannot heal by retrying: it fails after one request."""
    stand_in.otherwise = Reply(status=401)

    with pytest.raises(LlmFailure) as failure:
        await llm.extract_graph("I live in Lisbon.")

    assert ("HTTP 401", 1) == (failure.value.reason, len(stand_in.requests))


async def test_first_page_is_never_linked_and_costs_no_call(
    stand_in: StandIn, llm: OpenAIChatLlm
) -> None:
    """A page with no previous page starts a chain without asking the endpoint."""
    continuity = await llm.check_continuity(None, PAGE)

    assert (False, 0) == (continuity.linked, len(stand_in.requests))


async def test_repeated_failures_open_the_breaker_and_fail_fast(
    stand_in: StandIn, llm: OpenAIChatLlm
) -> None:
    """After THRESHOLD failed calls, further calls fail at once without reaching the server."""
    stand_in.otherwise = Reply(status=500)
    for _ in range(THRESHOLD):
        with pytest.raises(LlmFailure):
            await llm.page_keywords(PAGE)
    reached = len(stand_in.requests)

    with pytest.raises(LlmFailure) as failure:
        await llm.page_keywords(PAGE)

    assert ("circuit open", 0) == (failure.value.reason, failure.value.attempts)
    assert THRESHOLD * ATTEMPTS == reached == len(stand_in.requests)


async def test_breaker_lets_a_trial_through_after_cooldown_and_recovers(
    stand_in: StandIn, llm: OpenAIChatLlm, clock: FakeClock
) -> None:
    """Once the cool-down has passed a healed endpoint is used again."""
    stand_in.otherwise = Reply(status=500)
    for _ in range(THRESHOLD):
        with pytest.raises(LlmFailure):
            await llm.page_keywords(PAGE)
    stand_in.otherwise = Reply()

    clock.now = COOLDOWN
    keywords = await llm.page_keywords(PAGE)

    assert ["lisbon", "moving"] == keywords
    assert ["lisbon", "moving"] == await llm.page_keywords(PAGE)
