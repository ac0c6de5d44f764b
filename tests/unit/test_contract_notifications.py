"""The notification catalogue: one versioned contract per kind, readable old and new."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from memoryd.shared import subjects
from memoryd.shared.contracts import MemoryUpdated
from memoryd.shared.contracts.catalog import EVENT_TYPES
from memoryd.shared.contracts.notifications import (
    NOTIFICATION_TYPES,
    NotificationKind,
    PageAddedNotification,
    RecallableNotification,
    parse_notification,
)
from memoryd.shared.contracts.schema_export import (
    NOTIFICATION_TABLE_HEADER,
    notification_table,
    render_schemas,
)

ROOT = Path(__file__).resolve().parents[2]
EVENT_ID = uuid.UUID(int=7)
# A page.added notification as the workers published it before kinds had a version.
UNVERSIONED = {
    "kind": "page.added",
    "tenant": "acme",
    "user_id": "alice",
    "agent_id": "default",
    "session_id": "s1",
    "event_id": str(EVENT_ID),
    "stream_seq": 12,
    "item_ids": [str(EVENT_ID)],
}


def test_every_kind_has_exactly_one_contract() -> None:
    """The kinds a projection may name are the catalogue's kinds, each once."""
    kinds = [model.kind_name() for model in NOTIFICATION_TYPES]

    assert sorted(get_args(NotificationKind)) == sorted(kinds)
    assert len(set(kinds)) == len(kinds)


def test_every_cause_is_an_event_of_the_log() -> None:
    """A kind's causes are event types of the event catalogue, and every kind has one."""
    for model in NOTIFICATION_TYPES:
        assert model.caused_by, model.__name__
        assert set(model.caused_by) <= set(EVENT_TYPES), model.__name__


def test_every_kind_names_a_known_publisher() -> None:
    """A kind is published by a projection's consumer or by the recallable tracker."""
    publishers = {*subjects.PROJECTION_CONSUMERS, subjects.RECALLABLE_PUBLISHER}

    assert set() == {model.published_by for model in NOTIFICATION_TYPES} - publishers


def test_a_notification_without_a_version_is_version_one() -> None:
    """A notification published before versions existed parses as version 1 of its kind."""
    note = parse_notification(json.dumps(UNVERSIONED).encode())

    assert (PageAddedNotification, 1) == (type(note), note.version)


def test_the_envelope_still_reads_a_versioned_notification() -> None:
    """An SDK that parses the envelope (as it did before the catalogue) reads new notes."""
    published = PageAddedNotification.model_validate(UNVERSIONED).model_dump_json()

    note = MemoryUpdated.model_validate_json(published)

    assert ("page.added", 1, 12) == (note.kind, note.version, note.stream_seq)


def test_a_parsed_notification_is_a_memory_updated() -> None:
    """What the SDK hands out is its kind's model and still a MemoryUpdated."""
    note = parse_notification(json.dumps({**UNVERSIONED, "kind": "recallable"}).encode())

    assert isinstance(note, RecallableNotification)
    assert isinstance(note, MemoryUpdated)


def test_a_version_the_subscriber_does_not_know_is_refused() -> None:
    """A newer version of a kind is a validation error naming version, never misread."""
    newer = json.dumps({**UNVERSIONED, "version": 2}).encode()

    with pytest.raises(ValidationError, match="version"):
        parse_notification(newer)


def test_a_kind_outside_the_catalogue_is_refused() -> None:
    """A notification of an unknown kind is a validation error, not a guess."""
    with pytest.raises(ValidationError, match="kind"):
        parse_notification(json.dumps({**UNVERSIONED, "kind": "page.touched"}).encode())


def test_each_kind_schema_documents_its_cause_publisher_and_subject() -> None:
    """schemas/ has one file per kind and version with its causes, publisher and subject."""
    schema = json.loads(render_schemas()["notification.page.added.v1.json"])

    assert (["turn.recorded.v1"], "memoryd-stm", "memoryd.notify.<tenant>.<user>.page_added") == (
        schema["x-caused-by"],
        schema["x-published-by"],
        schema["x-subject"],
    )
    assert ["kind", 1] == [schema["required"][0], schema["properties"]["version"]["const"]]


def test_the_architecture_doc_shows_the_catalogue_the_models_render() -> None:
    """docs/architecture.md's notification table is the one rendered from the models."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    start = doc.index(NOTIFICATION_TABLE_HEADER)
    shown = doc[start : doc.index("\n\n", start) + 1]

    assert notification_table() == shown
