"""Record a worker's decision in the log before applying it, and ask the LLM safely.

The one way every deciding worker (chain, mtm, persona, graph) records a decision: a
decision (an LLM answer, an embedding) is published as a derived event with a
deterministic id, inside the trigger's transaction, before the worker applies it. When a
trigger is redelivered (the process died after publishing but before its commit) the worker
may decide differently; the stream then keeps the first copy and answers the publish as a
duplicate, and the worker applies that stored copy instead of its new answer, so live state
always equals the fold of the log. Live, a worker skips its own derived events when they
come back; replay folds them and decides nothing (``NoDecisions``).

An LLM step that fails is the same kind of decision: ``ask`` records ``llm.step_failed``
and answers with the offline extractor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import structlog
from nats.js import JetStreamContext

from memoryd.shared.adapters.embeddings import Vectors
from memoryd.shared.adapters.llm import (
    Continuity,
    GraphExtraction,
    LlmFailure,
    PageText,
    PersonaExtraction,
    SegmentSummary,
)
from memoryd.shared.adapters.nats_log import Outgoing, StreamPublisher, msg_id, subject_of
from memoryd.shared.contracts.catalog import decode_event, encode_event
from memoryd.shared.contracts.events import Event, derived_id
from memoryd.shared.contracts.memoryos import LlmStepFailed
from memoryd.shared.logging import REDACTOR

log = structlog.get_logger(__name__)

E = TypeVar("E", bound=Event)
A = TypeVar("A")

# What answers when an LLM step fails: the offline extractor (its name in the events).
FALLBACK = "offline-v1"


class DecisionLog(Protocol):
    """Where decisions are recorded: returns the copy the log holds."""

    async def record(self, event: E) -> E:
        """Append ``event`` (deduplicated by id) and return the stored copy."""
        ...


class JetStreamDecisionLog:
    """Record decisions in the JetStream event stream."""

    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self._js = js
        self._stream = stream
        # A lost acknowledgement (a NATS node down, a leader election) is sent again with
        # the same id: the stream keeps one copy, and a retry that finds it says duplicate.
        self._publisher = StreamPublisher(js, stream)

    async def record(self, event: E) -> E:
        """Publish ``event``; on a duplicate, read back and return the copy stored first."""
        ack = await self._publisher.acknowledged(
            Outgoing(subject_of(event), encode_event(event), msg_id(event))
        )
        if not ack.duplicate:
            return event
        stored = decode_event((await self._js.get_msg(self._stream, ack.seq)).data or b"")
        if not isinstance(stored, type(event)) or stored.event_id != event.event_id:
            raise RuntimeError(f"duplicate ack for {event.event_id} points at another event")
        if stored != event:
            log.info("decision_kept_from_log", event_id=str(event.event_id), stream_seq=ack.seq)
        return stored


class MemoryDecisionLog:
    """Keep decisions in memory (pure-logic tests): the first copy of an id wins."""

    def __init__(self) -> None:
        self.events: dict[str, Event] = {}

    async def record(self, event: E) -> E:
        """Store ``event`` unless its id is held; return the held copy."""
        held = self.events.setdefault(str(event.event_id), event)
        if not isinstance(held, type(event)):
            raise TypeError(f"event id {event.event_id} already holds a {type(held).__name__}")
        return held


async def ask(
    step: str,
    cause: Event,
    primary: Callable[[], Awaitable[A]],
    fallback: Callable[[], Awaitable[A]],
    decisions: DecisionLog,
    *,
    part: str = "",
) -> A:
    """Return ``primary()``'s answer; on LlmFailure record the failure and use ``fallback()``.

    The failure's id derives from the cause and the step, and ``part`` when one cause asks
    the same step more than once (the graph reads a turn's query and response apart).
    """
    try:
        return await primary()
    except LlmFailure as failure:
        log.warning(
            "llm_step_failed",
            step=step,
            part=part,
            event_id=str(cause.event_id),
            reason=failure.reason,
        )
        await decisions.record(step_failed(step, cause, failure, part))
        return await fallback()


def step_failed(step: str, cause: Event, failure: LlmFailure, part: str = "") -> LlmStepFailed:
    """Return the record of a failed LLM step, answered by the offline extractor."""
    name = f"llm.failed:{step}:{part}" if part else f"llm.failed:{step}"
    return LlmStepFailed(
        event_id=derived_id(cause.event_id, name),
        occurred_at=cause.occurred_at,
        scope=cause.scope,
        cause_event_id=cause.event_id,
        step=step,
        reason=REDACTOR.scrub(failure.reason)[:2_000],  # the log keeps it: never a key
        attempts=failure.attempts,
        fallback=FALLBACK,
    )


class NoDecisions:
    """Stand in for the ports and the decision log where no decision may be made (replay).

    Replay folds recorded decisions only: any call here is a bug, so it raises.
    """

    name = "replay"
    model_name = "replay"
    dimension = 0

    def _refuse(self, what: str) -> RuntimeError:
        return RuntimeError(f"replay makes no decisions, yet {what} was asked for")

    async def record(self, event: E) -> E:
        """Refuse to record a decision."""
        raise self._refuse(f"a {type(event).__name__}")

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Refuse to embed."""
        raise self._refuse("an embedding")

    async def check_continuity(self, previous: PageText | None, page: PageText) -> Continuity:
        """Refuse to ask the LLM."""
        raise self._refuse("a continuity verdict")

    async def summarise_chain(self, pages: Sequence[PageText]) -> str:
        """Refuse to ask the LLM."""
        raise self._refuse("a chain summary")

    async def page_keywords(self, page: PageText) -> list[str]:
        """Refuse to ask the LLM."""
        raise self._refuse("page keywords")

    async def summarise_segment(
        self, previous_summary: str, pages: Sequence[PageText]
    ) -> SegmentSummary:
        """Refuse to ask the LLM."""
        raise self._refuse("a segment summary")

    async def extract_persona(self, pages: Sequence[PageText]) -> PersonaExtraction:
        """Refuse to ask the LLM."""
        raise self._refuse("a persona extraction")

    async def extract_graph(self, text: str) -> GraphExtraction:
        """Refuse to ask the LLM."""
        raise self._refuse("a graph extraction")

    async def aclose(self) -> None:
        """Hold nothing."""
