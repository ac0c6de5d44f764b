"""Unit tests for asking the LLM safely and for the in-memory decision log."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from memoryd.services.runtime.decisions import MemoryDecisionLog, NoDecisions, ask
from memoryd.shared.adapters.llm import LlmFailure
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.memoryos import LlmStepFailed, PageChained

SCOPE = Scope(tenant="t", user_id="u")
AT = datetime(2026, 1, 1, tzinfo=UTC)


def chained(summary: str) -> PageChained:
    """Return a page-chained decision with a fixed id and the given summary."""
    return PageChained(
        event_id=uuid.UUID(int=7),
        occurred_at=AT,
        scope=SCOPE,
        turn_id=uuid.UUID(int=1),
        linked=False,
        meta_chain=summary,
        decided_by="test",
    )


async def test_a_failed_step_is_recorded_and_the_fallback_answers() -> None:
    """An LlmFailure becomes an llm.step_failed event and the fallback's answer is used."""
    decisions = MemoryDecisionLog()

    async def broken() -> str:
        raise LlmFailure("summarise_chain", "malformed JSON", 3)

    async def offline() -> str:
        return "offline summary"

    answer = await ask("summarise_chain", chained("x"), broken, offline, decisions)

    [failure] = decisions.events.values()
    assert "offline summary" == answer
    assert isinstance(failure, LlmStepFailed)
    assert ("summarise_chain", 3, "malformed JSON") == (
        failure.step,
        failure.attempts,
        failure.reason,
    )


async def test_a_working_step_records_nothing() -> None:
    """A step that answers is not recorded as a failure."""
    decisions = MemoryDecisionLog()

    async def works() -> str:
        return "llm summary"

    answer = await ask("summarise_chain", chained("x"), works, works, decisions)

    assert ("llm summary", {}) == (answer, decisions.events)


async def test_the_first_recorded_decision_wins() -> None:
    """Recording a second answer under the same id returns the first one."""
    decisions = MemoryDecisionLog()

    await decisions.record(chained("first answer"))
    kept = await decisions.record(chained("second answer"))

    assert "first answer" == kept.meta_chain


async def test_replay_stand_in_refuses_every_decision() -> None:
    """The replay stand-in raises on any embedding, LLM call or recording."""
    refuse = NoDecisions()

    with pytest.raises(RuntimeError, match="replay makes no decisions"):
        await refuse.embed(["text"])
    with pytest.raises(RuntimeError, match="replay makes no decisions"):
        await refuse.summarise_chain([])
    with pytest.raises(RuntimeError, match="replay makes no decisions"):
        await refuse.record(chained("x"))
