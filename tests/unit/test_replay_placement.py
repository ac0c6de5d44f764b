"""Replay folds a projection's own decisions where it folded them live: with their trigger."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from memoryd.services.runtime.projection import Positioned
from memoryd.services.runtime.replay import batches, placed
from memoryd.shared.contracts import Scope, TurnRecorded
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.memoryos import LlmStepFailed, PageChained

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="t", user_id="u")


@dataclass(frozen=True)
class Deciding:
    """A projection as replay sees it: it folds turns and its decisions about them."""

    consumer: str = "chain"
    folds: frozenset[type[Event]] = frozenset({TurnRecorded, PageChained, LlmStepFailed})
    decides: frozenset[type[Event]] = frozenset({PageChained, LlmStepFailed})


def turn(query: str) -> TurnRecorded:
    return TurnRecorded(occurred_at=T0, scope=SCOPE, query=query, response="")


def chained(about: TurnRecorded) -> PageChained:
    return PageChained(
        occurred_at=T0,
        scope=SCOPE,
        turn_id=about.event_id,
        linked=False,
        meta_chain="m",
        decided_by="x",
    )


def failed(about: Event) -> LlmStepFailed:
    return LlmStepFailed(
        occurred_at=T0,
        scope=SCOPE,
        cause_event_id=about.event_id,
        step="s",
        reason="r",
        attempts=1,
        fallback="f",
    )


def log(*events: Event) -> list[Positioned]:
    """Return ``events`` as the log holds them, from sequence 1."""
    return [Positioned(event, sequence) for sequence, event in enumerate(events, 1)]


def order(items: list[Positioned]) -> list[tuple[uuid.UUID, int]]:
    return [(item.event.event_id, item.sequence) for item in items]


def test_a_decision_folds_right_after_its_trigger_not_where_its_copy_lies() -> None:
    """Live, the second turn was folded after the first one's decision: so is it in replay."""
    first, second = turn("a"), turn("b")
    decision = chained(first)

    folded = placed(Deciding(), log(first, second, decision), target=3)  # type: ignore[arg-type]

    assert [(first.event_id, 1), (decision.event_id, 1), (second.event_id, 2)] == order(folded)


def test_a_decision_past_the_target_is_folded_when_its_trigger_is_within() -> None:
    """The worker stopped with its decision's copy not read back: the fold still has it."""
    first, second = turn("a"), turn("b")
    decisions = [chained(first), chained(second)]

    folded = placed(Deciding(), log(first, second, *decisions), target=1)  # type: ignore[arg-type]

    assert [first.event_id, decisions[0].event_id] == [item.event.event_id for item in folded]


def test_a_decision_about_a_decision_stands_at_the_first_trigger() -> None:
    """A failed step recorded about a decision folds where that decision's trigger is."""
    first = turn("a")
    decision = chained(first)
    failure = failed(decision)

    folded = placed(Deciding(), log(first, turn("b"), decision, failure), target=1)  # type: ignore[arg-type]

    assert [1, 1, 1] == [item.sequence for item in folded]
    assert failure.event_id == folded[-1].event.event_id


def test_a_decision_whose_trigger_is_not_in_the_log_stays_where_its_copy_is() -> None:
    """A trigger gone from the log (purged) leaves its decision at its own sequence."""
    gone = turn("purged")
    decision = chained(gone)

    folded = placed(Deciding(), log(turn("a"), decision), target=5)  # type: ignore[arg-type]

    assert (decision.event_id, 2) == order(folded)[-1]


def test_batches_never_split_a_trigger_from_its_decisions() -> None:
    """A batch boundary falls between sequences, never inside one."""
    items = [Positioned(turn(str(s)), s) for s in (1, 2, 2, 2, 3, 4)]

    split = [[item.sequence for item in batch] for batch in batches(items, 2)]

    assert [[1, 2, 2, 2], [3, 4]] == split
