"""Unit tests of the indexer's event -> index operation mapping."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import numpy as np

from memoryd.services.indexer.items import (
    Delete,
    DeleteWhere,
    KeyOptions,
    Upsert,
    composed,
    first_person_facts,
    memory_upsert,
    plan,
    speaker_of,
    turn_upsert,
)
from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.items import point_id
from memoryd.shared.domain.memories import memory_id_for_key

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
ALICE = Scope(tenant="acme", user_id="alice", session_id="s1")
MALLORY = Scope(tenant="acme", user_id="mallory")


def remembered(scope: Scope, memory_id: uuid.UUID, content: str = "likes tea") -> MemoryRemembered:
    return MemoryRemembered(
        occurred_at=NOW, scope=scope, memory_id=memory_id, key="drink", content=content
    )


def test_a_turn_is_indexed_with_both_sides_and_its_provenance() -> None:
    """A turn's point holds query and response, its scope, and the turn's event id."""
    event = TurnRecorded(occurred_at=NOW, scope=ALICE, query="Hi there", response="Hello!")
    op = turn_upsert(event)
    assert "Hi there\nHello!" == op.text
    assert ("acme", "alice", "s1", "turn") == (
        op.payload.tenant,
        op.payload.user_id,
        op.payload.session_id,
        op.payload.kind,
    )
    assert str(event.event_id) == op.payload.turn_id
    assert NOW.timestamp() == op.payload.occurred_at


def test_remembering_again_replaces_the_same_point() -> None:
    """An update of a memory targets the point of the first version (same id)."""
    memory_id = uuid.uuid4()
    first = memory_upsert(remembered(ALICE, memory_id, "likes tea"))
    second = memory_upsert(remembered(ALICE, memory_id, "likes coffee"))
    assert first.id == second.id
    assert "drink: likes coffee" == second.text


def test_forgetting_by_key_deletes_the_point_remember_by_key_made() -> None:
    """Forget by key removes the point of the memory the client stored under that key."""
    memory_id = memory_id_for_key(ALICE, "drink")
    stored = memory_upsert(remembered(ALICE, memory_id))
    forgotten = plan([MemoryForgotten(occurred_at=NOW, scope=ALICE, key="drink")])[0]
    assert [Delete((stored.id,))] == forgotten


def test_another_user_cannot_delete_or_overwrite_a_point_by_naming_its_id() -> None:
    """A point id includes its owner, so the same memory id from another user is another point."""
    memory_id = uuid.uuid4()
    assert point_id(memory_id, "memory", ALICE) != point_id(memory_id, "memory", MALLORY)
    attack = plan([MemoryForgotten(occurred_at=NOW, scope=MALLORY, memory_id=memory_id)])[0]
    assert [Delete((point_id(memory_id, "memory", MALLORY),))] == attack


def test_session_end_clears_only_that_sessions_conversation_memories() -> None:
    """A session end deletes conversation-category memories of that user's session."""
    [op] = plan([SessionEnded(occurred_at=NOW, scope=ALICE)])[0]
    assert isinstance(op, DeleteWhere)
    assert ("alice", "s1", ("memory",), (Category.CONVERSATION.value,)) == (
        op.filter.user_id,
        op.filter.session_id,
        op.filter.kinds,
        op.filter.categories,
    )


def test_an_expired_memory_is_deleted_and_other_events_do_nothing() -> None:
    """Expiry deletes the memory's point; events the index ignores plan nothing."""
    memory_id = uuid.uuid4()
    expired = MemoryExpired(
        occurred_at=NOW,
        scope=ALICE,
        memory_id=memory_id,
        source_event_id=uuid.uuid4(),
        expires_at=NOW,
    )
    ops = plan([expired])[0]
    assert [Delete((point_id(memory_id, "memory", ALICE),))] == ops
    assert all(isinstance(op, Upsert) for op in plan([remembered(ALICE, memory_id)])[0])


def turn(query: str = "", response: str = "", scope: Scope = ALICE) -> TurnRecorded:
    return TurnRecorded(occurred_at=NOW, scope=scope, query=query, response=response)


def upserts(events: list[TurnRecorded]) -> list[Upsert]:
    return [op for op in plan(events)[0] if isinstance(op, Upsert)]


def test_a_short_previous_turn_and_the_reply_are_indexed_together_as_the_reply() -> None:
    """A question, then "Twice a week.": one window key holds both, mapped to the reply."""
    question, reply = turn(query="How often do you run?"), turn(response="Twice a week.")
    keys = upserts([question, reply])
    [window] = [op for op in keys if op.payload.extra["key"] == "window"]
    assert "How often do you run?\nTwice a week." == window.text
    assert str(reply.event_id) == window.payload.turn_id
    assert str(turn_upsert(reply).id) == window.payload.extra["of"]
    assert "Twice a week." == window.payload.extra["text"]


def test_a_long_previous_turn_makes_no_window() -> None:
    """A previous turn over 40 words carries its own context: no window key."""
    keys = upserts([turn(response=" ".join(["word"] * 41)), turn(query="Thanks, that helps.")])
    assert all(op.payload.extra["key"] != "window" for op in keys)


def test_windows_continue_across_batches_and_never_cross_sessions() -> None:
    """A turn carried over from an earlier batch joins the next; another session's does not."""
    first = turn(query="Where did you go?")
    _, last = plan([first])
    ops, _ = plan([turn(response="To Lisbon.")], last)
    assert any(op.payload.extra["key"] == "window" for op in ops if isinstance(op, Upsert))
    elsewhere = turn(response="To Lisbon.", scope=ALICE.model_copy(update={"session_id": "s2"}))
    ops, _ = plan([elsewhere], last)
    assert all(op.payload.extra["key"] != "window" for op in ops if isinstance(op, Upsert))


def test_first_person_sentences_of_the_user_become_fact_keys_of_the_turn() -> None:
    """Each "I ..."/"My ..." sentence of four words or more is a key mapping back to the turn."""
    event = turn(query="Hi! I adopted a greyhound last month. I see. My sister loves him. Cool.")
    facts = [op for op in upserts([event]) if op.payload.extra["key"] == "fact"]
    assert ["I adopted a greyhound last month.", "My sister loves him."] == [f.text for f in facts]
    assert {str(turn_upsert(event).id)} == {f.payload.extra["of"] for f in facts}
    assert {str(event.event_id)} == {f.payload.turn_id for f in facts}


def test_the_agents_first_person_sentences_are_not_facts_about_the_user() -> None:
    """An agent's "I would recommend ..." is about the agent: no fact key."""
    keys = upserts([turn(response="I would recommend a long walk every day.")])
    assert ["turn"] == [op.payload.extra["key"] for op in keys]


def test_keys_are_deterministic_and_a_transcript_speaker_is_recorded() -> None:
    """Planning the same events twice gives the same point ids; "Name: ..." names the speaker."""
    events = [
        turn(query="Mel: How was the trip?"),
        turn(response="Caroline: I loved every minute of it."),
    ]
    assert [op.id for op in upserts(events)] == [op.id for op in upserts(events)]
    assert {"Caroline"} == {op.payload.extra.get("speaker") for op in upserts(events)[1:]}


def test_speaker_and_facts_of_a_transcript_line() -> None:
    """The speaker's name is not part of a fact; a line with no "Name: " has no speaker."""
    assert "Caroline" == speaker_of("Caroline: I went to the beach.")
    assert speaker_of("I went to the beach: it was nice.") is None
    assert ["I went to the beach."] == first_person_facts("Caroline: I went to the beach. Fun!")


def test_a_composed_window_names_its_turns_as_the_texts_to_embed() -> None:
    """Composed, the window keeps its joined text for BM25 and asks the model for its two
    turns only; embedded, it asks for the joined text."""
    question, reply = turn(query="How often do you run?"), turn(response="Twice a week.")
    for compose, texts in ((True, ("How often do you run?", "Twice a week.")), (False, None)):
        ops, _ = plan([question, reply], None, KeyOptions(composed_windows=compose))
        [window] = [
            op for op in ops if isinstance(op, Upsert) and op.payload.extra["key"] == "window"
        ]
        assert "How often do you run?\nTwice a week." == window.text
        assert (texts or (window.text,)) == window.texts()


def test_a_composed_vector_weights_each_part_by_the_root_of_its_words() -> None:
    """Four words weigh twice one word; the result is a unit vector."""
    x, y = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    vector = composed([x, y], ["one two three four", "five"])
    assert np.allclose([2 / np.sqrt(5), 1 / np.sqrt(5)], vector)
