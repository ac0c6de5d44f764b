"""Unit tests of the retrieval benchmark's ingest mapping."""

from __future__ import annotations

from datetime import UTC, datetime

from memoryd.services.bench.datasets import Conversation, Session, Turn
from memoryd.services.bench.retrieval import conversation_events, token

DATE = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def conversation() -> Conversation:
    turns = (
        Turn(id="D1:1", role="user", speaker="Caroline", text="I went to a support group."),
        Turn(id="D1:2", role="assistant", speaker="Melanie", text="That sounds great!"),
    )
    return Conversation(id="conv-26", sessions=(Session(id="session_1", date=DATE, turns=turns),))


def test_unsafe_ids_become_stable_scope_tokens() -> None:
    """A dataset id with characters a subject cannot hold is hashed, the same every time."""
    assert "conv-26" == token("conv-26")
    assert token("a/b c") == token("a/b c")
    assert "/" not in token("a/b c")


def test_each_turn_becomes_one_event_in_order_with_its_speaker_and_date() -> None:
    """User turns are queries, the other side responses; ids map back to the dataset turns."""
    scope, events, mapping = conversation_events("locomo", conversation(), speaker=True)
    assert ("locomo", "conv-26", None) == (scope.tenant, scope.user_id, scope.session_id)
    assert ["Caroline: I went to a support group.", ""] == [e.query for e in events]
    assert ["", "Melanie: That sounds great!"] == [e.response for e in events]
    assert ["D1:1", "D1:2"] == [mapping[str(e.event_id)] for e in events]
    assert DATE == events[0].occurred_at
    assert "session_1" == events[0].scope.session_id


def test_every_run_writes_the_same_event_ids() -> None:
    """Ids come from the turns' places, so two runs index the same points under the same ids
    (and equal scores rank alike); each turn of each dataset has its own."""
    first = [e.event_id for e in conversation_events("locomo", conversation(), True)[1]]
    again = [e.event_id for e in conversation_events("locomo", conversation(), True)[1]]
    other = [e.event_id for e in conversation_events("longmemeval", conversation(), False)[1]]
    assert first == again
    assert 4 == len({*first, *other})
