"""Record a worker's decision in the log before applying it, and ask the LLM safely.

The one way every deciding worker (chain, mtm, persona, graph) records a decision: a
decision (an LLM answer, an embedding) is published as a derived event with a
deterministic id, inside the trigger's transaction, before the worker applies it. When a
trigger is redelivered (the process died after publishing but before its commit) the worker
may decide differently; the stream then keeps the first copy and answers the publish as a
duplicate, and the worker applies that stored copy instead of its new answer, so live state
always equals the fold of the log. Live, a worker skips its own derived events when they
come back; replay folds them and decides nothing (``NoDecisions``).

Inside a batch's transaction (``pipelined``) a decision is sent without waiting for its
acknowledgement, and the batch goes on folding its own copy: the acknowledgements are awaited
together before the commit. When one says the log already held another copy (the rare
redelivery above), ``DecisionsDiverged`` rolls the batch back, and it is applied again waiting
for each decision, so it folds the copies the log kept. Each decision waited for alone cost a
round trip on the event loop (a send, an acknowledgement read, a future): about four a turn.

An LLM step that fails is the same kind of decision: ``ask`` records ``llm.step_failed``
and answers with the offline extractor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, TypeVar

import structlog
from nats.js import JetStreamContext, api

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


class DecisionsDiverged(Exception):
    """The log holds another copy of a decision a pipelined batch folded: apply it again."""


@dataclass(frozen=True, slots=True)
class _Sent:
    """A decision sent inside ``pipelined``: its log, the copy folded, its acknowledgement."""

    log: JetStreamDecisionLog
    event: Event
    message: Outgoing
    ack: asyncio.Future[api.PubAck]


# The decisions sent in the running batch without waiting (None: outside ``pipelined``).
_IN_FLIGHT: ContextVar[list[_Sent] | None] = ContextVar("decisions_in_flight", default=None)


@contextlib.asynccontextmanager
async def pipelined() -> AsyncIterator[None]:
    """Send the decisions recorded inside without waiting for each; on leaving, wait for
    their acknowledgements and raise ``DecisionsDiverged`` if the log kept another copy of
    one (the caller rolls back and applies again outside). An error inside waits for none."""
    sent: list[_Sent] = []
    token = _IN_FLIGHT.set(sent)
    try:
        try:
            yield
        finally:
            _IN_FLIGHT.reset(token)
        await _confirm(sent)
    finally:
        # An acknowledgement nobody waits for any more would hold one of the client's
        # pending-publish slots until the server answered, forever if it never does.
        for item in sent:
            item.ack.cancel()


async def _confirm(sent: Sequence[_Sent]) -> None:
    """Wait for the decisions' acknowledgements; raise if the log kept another copy of one."""
    if not sent:
        return
    await sent[0].log.publisher.await_acks(item.ack for item in sent)
    for item in sent:
        ack = await item.log.publisher.settled(item.message, item.ack)
        if ack.duplicate and await item.log.stored_copy(item.event, ack) != item.event:
            raise DecisionsDiverged(
                f"the log holds another copy of decision {item.event.event_id} (seq {ack.seq})"
            )


class JetStreamDecisionLog:
    """Record decisions in the JetStream event stream."""

    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self._js = js
        self._stream = stream
        # A lost acknowledgement (a NATS node down, a leader election) is sent again with
        # the same id: the stream keeps one copy, and a retry that finds it says duplicate.
        self.publisher = StreamPublisher(js, stream)

    async def record(self, event: E) -> E:
        """Publish ``event``; on a duplicate, read back and return the copy stored first.

        Inside ``pipelined``: send it and return it at once (checked when the batch ends).
        """
        message = Outgoing(subject_of(event), encode_event(event), msg_id(event))
        in_flight = _IN_FLIGHT.get()
        if in_flight is not None:
            in_flight.append(_Sent(self, event, message, await self.publisher.start(message)))
            return event
        return await self.stored_copy(event, await self.publisher.acknowledged(message))

    async def stored_copy(self, event: E, ack: api.PubAck) -> E:
        """Return the copy of ``event`` the log holds, given its publish acknowledgement."""
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
