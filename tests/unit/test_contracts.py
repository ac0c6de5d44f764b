"""Event contracts: validation gives clear errors, and schemas/ matches the models."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from memoryd.shared.contracts import (
    EVENT_TYPES,
    MemoryForgotten,
    MemoryRemembered,
    Scope,
    SessionEnded,
    TurnRecorded,
    decode_event,
    encode_event,
)
from memoryd.shared.contracts.events import MAX_TEXT_CHARS
from memoryd.shared.contracts.schema_export import render_schemas
from memoryd.shared.domain.memories import memory_id_for_key, memory_identity

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="alice")


def test_schema_files_match_the_models() -> None:
    """schemas/ holds exactly what the models export (run `memoryd schemas` after a change)."""
    on_disk = {path.name: path.read_text() for path in SCHEMAS.glob("*.json")}
    assert render_schemas() == on_disk


@pytest.mark.parametrize("bad", ["a.b", "a*", ">", "has space", "", "x" * 65, "ünï"])
def test_scope_ids_must_be_safe_subject_tokens(bad: str) -> None:
    """An id that could break the subject hierarchy is rejected, naming the field."""
    with pytest.raises(ValidationError, match="tenant"):
        Scope(tenant=bad, user_id="alice")


def test_events_round_trip_through_bytes() -> None:
    """What is written to the log decodes back to an equal event."""
    event = TurnRecorded(occurred_at=NOW, scope=SCOPE, query="hi", response="hello")
    assert event == decode_event(encode_event(event))


def test_empty_and_oversized_content_are_rejected() -> None:
    """A memory must have content, and not more than the limit."""
    with pytest.raises(ValidationError, match="content"):
        MemoryRemembered(occurred_at=NOW, scope=SCOPE, memory_id=uuid.uuid4(), content="")
    with pytest.raises(ValidationError, match="content"):
        MemoryRemembered(
            occurred_at=NOW, scope=SCOPE, memory_id=uuid.uuid4(), content="x" * (MAX_TEXT_CHARS + 1)
        )
    with pytest.raises(ValidationError, match="query or a response"):
        TurnRecorded(occurred_at=NOW, scope=SCOPE, query=" ", response="")


def test_timestamps_must_be_valid_and_timezone_aware() -> None:
    """A naive or malformed timestamp is rejected rather than guessed."""
    with pytest.raises(ValidationError, match="occurred_at"):
        TurnRecorded(occurred_at=datetime(2026, 1, 5), scope=SCOPE, query="q", response="r")
    raw = encode_event(TurnRecorded(occurred_at=NOW, scope=SCOPE, query="q", response="r"))
    with pytest.raises(ValidationError, match="occurred_at"):
        decode_event(raw.replace(b"2026-01-05T09:00:00Z", b"yesterday"))


def test_importance_is_bounded() -> None:
    """Importance lives in 0..1."""
    with pytest.raises(ValidationError, match="importance"):
        MemoryRemembered(
            occurred_at=NOW, scope=SCOPE, memory_id=uuid.uuid4(), content="x", importance=1.5
        )


def test_forget_names_exactly_one_memory() -> None:
    """Forget takes an id or a key, not both and not neither."""
    with pytest.raises(ValidationError, match="exactly one"):
        MemoryForgotten(occurred_at=NOW, scope=SCOPE)
    with pytest.raises(ValidationError, match="exactly one"):
        MemoryForgotten(occurred_at=NOW, scope=SCOPE, memory_id=uuid.uuid4(), key="k")


def test_session_end_needs_a_session() -> None:
    """Ending a session without naming it is an error."""
    with pytest.raises(ValidationError, match="session_id"):
        SessionEnded(occurred_at=NOW, scope=SCOPE)


def test_unknown_event_types_and_fields_are_rejected() -> None:
    """Unknown types and stray fields are errors, not silently dropped data."""
    raw = encode_event(TurnRecorded(occurred_at=NOW, scope=SCOPE, query="q", response="r"))
    with pytest.raises(ValidationError):
        decode_event(raw.replace(b"turn.recorded.v1", b"turn.recorded.v9"))
    with pytest.raises(ValidationError, match="surprise"):
        decode_event(raw.replace(b'"query"', b'"surprise":1,"query"'))


def test_an_event_read_from_the_wire_must_carry_its_event_id() -> None:
    """Bytes without event_id are refused with the reason; a Python constructor fills it in."""
    event = TurnRecorded(occurred_at=NOW, scope=SCOPE, query="hi", response="hello")
    raw = event.model_dump(mode="json")
    del raw["event_id"]

    with pytest.raises(ValidationError, match="event_id is required on the wire"):
        decode_event(json.dumps(raw).encode())
    assert isinstance(event.event_id, uuid.UUID)


def test_every_event_schema_lists_event_id_as_required() -> None:
    """A publisher working from schemas/ learns that it must send event_id."""
    for model in EVENT_TYPES:
        assert "event_id" in model.model_json_schema()["required"], model.__name__


@pytest.mark.parametrize(
    "fields",
    [
        {"content": "a\x00b"},
        {"content": "ok", "key": "k\x00"},
        {"content": "ok", "metadata": {"note": "a\x00"}},
        {"content": "ok", "metadata": {"no\x00te": "a"}},
        {"content": "ok", "metadata": {"tags": ["x", {"deep": "\x00"}]}},
    ],
)
def test_nul_characters_are_refused_in_every_text_field(fields: dict[str, object]) -> None:
    """PostgreSQL cannot store NUL: the contract refuses it, naming where it was."""
    with pytest.raises(ValidationError, match="NUL"):
        MemoryRemembered(occurred_at=NOW, scope=SCOPE, **fields)
    with pytest.raises(ValidationError, match="NUL"):
        TurnRecorded(occurred_at=NOW, scope=SCOPE, query="q\x00", response="r")


@pytest.mark.parametrize(
    "fields",
    [
        {"content": "a\x00b"},
        {"content": "ok", "metadata": {"no\x00te": "a"}},
        {"content": "ok", "metadata": {"tags": ["x", {"deep": "\x00"}]}},
    ],
)
def test_a_decoded_event_with_nul_is_refused_naming_where(fields: dict[str, object]) -> None:
    """From the log's bytes too (the decoder looks at the bytes first: it must not miss one)."""
    good = MemoryRemembered(occurred_at=NOW, scope=SCOPE, content="ok")
    data = json.dumps({**json.loads(encode_event(good)), **fields}).encode()
    assert b"\\u0000" in data  # JSON escapes NUL: the form a publisher sends
    with pytest.raises(ValidationError, match="NUL"):
        decode_event(data)


def test_a_text_that_only_spells_a_nul_escape_is_kept() -> None:
    """A backslash followed by u0000 is text, not NUL: it decodes as written."""
    event = MemoryRemembered(occurred_at=NOW, scope=SCOPE, content="write \\u0000 for NUL")
    assert decode_event(encode_event(event)) == event


def test_a_key_is_a_memory_identity_whatever_id_the_client_sends() -> None:
    """Two remembers of one key with different ids name one memory; so does forget by key."""
    first = MemoryRemembered(
        occurred_at=NOW, scope=SCOPE, memory_id=uuid.uuid4(), key="diet", content="a"
    )
    second = MemoryRemembered(
        occurred_at=NOW, scope=SCOPE, memory_id=uuid.uuid4(), key="diet", content="b"
    )
    forget = MemoryForgotten(occurred_at=NOW, scope=SCOPE, key="diet")
    keyless = MemoryRemembered(occurred_at=NOW, scope=SCOPE, content="c")

    assert memory_identity(first) == memory_identity(second) == memory_identity(forget)
    assert memory_id_for_key(SCOPE, "diet") == memory_identity(first)
    assert keyless.event_id == memory_identity(keyless)
