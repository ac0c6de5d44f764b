"""A validation error reads as one line: each field's path and rule, no input values."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from memoryd.services.runtime.projection import DeadLetter, decode_message
from memoryd.shared.adapters.nats_log import subject_of
from memoryd.shared.contracts import Scope, TurnRecorded
from memoryd.shared.contracts.catalog import decode_event, encode_event
from memoryd.shared.contracts.errors import describe_validation_error

BAD_TURN = json.dumps(
    {
        "type": "turn.recorded.v1",
        "event_id": "4a0c3f0e-9c4b-4f4e-9a51-0d5d3c1f2b7a",
        "occurred_at": "2026-01-05T09:00:00Z",
        "scope": {"tenant": "acme", "user_id": "alice smith"},
        "response": "secret-token-123",
    }
).encode()


def _error(data: bytes) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        decode_event(data)
    return caught.value


def test_each_field_path_and_rule_on_one_line() -> None:
    """The user id's pattern and the missing query are named by path, on one line."""
    text = describe_validation_error(_error(BAD_TURN))
    assert "\n" not in text
    assert (
        "scope.user_id: String should match pattern '^[A-Za-z0-9_-]{1,64}$'; query: Field required"
    ) == text


def test_input_values_stay_out() -> None:
    """The offending values (which may be secrets) never appear in the description."""
    assert "alice smith" not in describe_validation_error(_error(BAD_TURN))


def test_bad_json_is_one_line_too() -> None:
    """Bytes that are not JSON get the parser's one-line message."""
    assert describe_validation_error(_error(b"not json")).startswith("Invalid JSON:")


def test_decode_message_dead_letter_reason_is_one_line() -> None:
    """A worker parks a malformed event with a one-line reason naming the field."""
    with pytest.raises(DeadLetter) as caught:
        decode_message(BAD_TURN, "memoryd.ev.acme.alice.turn_recorded_v1")
    reason = str(caught.value)
    assert "\n" not in reason
    assert reason.startswith("invalid event: scope.user_id: String should match pattern")


def test_a_decoded_message_filed_under_another_subject_is_still_refused() -> None:
    """Decoding is shared by the workers of a process (cached by bytes and subject): the same
    bytes read first under their own subject and then under another user's are refused there."""
    turn = TurnRecorded(
        occurred_at=datetime(2026, 1, 5, 9, tzinfo=UTC),
        scope=Scope(tenant="acme", user_id="alice"),
        query="hello",
        response="hi",
    )
    data = encode_event(turn)
    own = subject_of(turn)
    assert turn == decode_message(data, own)
    assert decode_message(data, own) is decode_message(data, own)
    with pytest.raises(DeadLetter, match="does not match the event"):
        decode_message(data, own.replace(".alice.", ".bob."))
