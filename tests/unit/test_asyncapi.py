"""The AsyncAPI document names every subject the code uses and every contract's schema."""

from __future__ import annotations

from memoryd.shared import subjects
from memoryd.shared.contracts.asyncapi import MSG_ID_HEADER, asyncapi_document
from memoryd.shared.contracts.catalog import EVENT_TYPES
from memoryd.shared.contracts.notifications import NOTIFICATION_TYPES
from memoryd.shared.contracts.scope import Scope


def fill(address: str, **values: str) -> str:
    for name, value in values.items():
        address = address.replace("{" + name + "}", value)
    return address


def test_the_channel_addresses_are_the_subjects_the_code_uses() -> None:
    channels = asyncapi_document()["channels"]
    scope = Scope(tenant="acme", user_id="alice")
    assert subjects.event_subject(scope, "turn.recorded.v1") == fill(
        channels["events"]["address"], tenant="acme", user="alice", eventType="turn_recorded_v1"
    )
    assert subjects.notify_subject("acme", "alice", "page.added") == fill(
        channels["notifications"]["address"], tenant="acme", user="alice", kind="page_added"
    )
    assert subjects.recall_subject("acme") == fill(channels["recall"]["address"], tenant="acme")
    assert subjects.list_memories_subject("acme") == fill(
        channels["listMemories"]["address"], tenant="acme"
    )
    assert subjects.browse_subject("acme") == fill(channels["browse"]["address"], tenant="acme")


def test_every_event_and_notification_has_a_message_with_a_resolvable_schema() -> None:
    document = asyncapi_document()
    messages, schemas = document["components"]["messages"], document["components"]["schemas"]
    assert len(messages) == len(EVENT_TYPES) + len(NOTIFICATION_TYPES) + 9
    for name, message in messages.items():
        assert message["payload"]["$ref"].split("/")[-1] in schemas, name
    for model in EVENT_TYPES:
        event = messages[str(model.model_fields["type"].default)]
        assert [MSG_ID_HEADER] == event["headers"]["required"]
