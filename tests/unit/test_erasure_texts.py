"""What `memoryd erase` deletes from the embedding cache: every text embedded for the user."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memoryd.services.erasure import Logged, embedded_texts, erased_already
from memoryd.shared.contracts import MemoryRemembered, PageEvicted, Scope, TurnRecorded, UserErased
from memoryd.shared.contracts.memoryos import LearnedFact, PersonaExtracted

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
ALICE = Scope(tenant="acme", user_id="alice")


def turn(query: str, response: str) -> TurnRecorded:
    return TurnRecorded(occurred_at=T0, scope=ALICE, query=query, response=response)


def test_every_key_page_and_fact_text_is_named() -> None:
    """Turn, window and first-person keys (both sides), memories, pages and persona facts."""
    first, second = turn("Where to?", "Lisbon."), turn("I love the old trams of Lisbon", "Me too")
    memory = MemoryRemembered(occurred_at=T0, scope=ALICE, key="diet", content="vegetarian")
    page = PageEvicted(
        occurred_at=T0,
        scope=ALICE,
        cause_event_id=second.event_id,
        turn_id=first.event_id,
        query="Where to?",
        response="Lisbon.",
        turn_occurred_at=T0,
    )
    learned = PersonaExtracted(
        occurred_at=T0,
        scope=ALICE,
        cause_event_id=uuid.uuid4(),
        segment_id="s",
        profile={},
        facts=(LearnedFact(text="Alice loves trams", vector=""),),
        traits={},
        agent_traits=(LearnedFact(text="be brief", vector=""),),
        turn_ids=(),
        session_ids=(),
        embedder="m",
        decided_by="offline",
    )

    texts = embedded_texts([first, second, memory, page, learned])

    assert {
        "Where to?\nLisbon.",  # the first turn, and its page
        "I love the old trams of Lisbon\nMe too",
        "Where to?\nLisbon.\nI love the old trams of Lisbon\nMe too",  # the window
        "I love the old trams of Lisbon",  # a first-person fact of the user's side
        "diet: vegetarian",
        "Alice loves trams",
        "be brief",
    } == texts


def test_a_log_of_nothing_but_erasures_is_erased_already() -> None:
    """Only erasures: erased already, at the last one's time; anything else: not."""
    erasure = UserErased(occurred_at=T0, scope=ALICE)

    assert T0 == erased_already(Logged(1, [erasure]))
    assert erased_already(Logged(2, [erasure, turn("q", "r")])) is None
    assert erased_already(Logged(2, [erasure])) is None  # one message did not decode
    assert erased_already(Logged(0, [])) is None
