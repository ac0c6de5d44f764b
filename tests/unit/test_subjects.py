"""The subject hierarchy."""

from __future__ import annotations

from memoryd.shared import subjects
from memoryd.shared.contracts import Scope


def test_event_subjects_carry_tenant_user_and_type() -> None:
    """An event subject names tenant, user and the versioned type."""
    subject = subjects.event_subject(Scope(tenant="acme", user_id="alice"), "turn.recorded.v1")
    assert "memoryd.ev.acme.alice.turn_recorded_v1" == subject


def test_notification_filters_narrow_to_a_tenant_or_a_user() -> None:
    """Subscribers can follow a whole tenant or one user."""
    assert "memoryd.notify.acme.*.>" == subjects.notify_filter("acme")
    assert "memoryd.notify.acme.bob.>" == subjects.notify_filter("acme", "bob")


def test_list_memories_subjects_put_the_tenant_where_permissions_can_grant_it() -> None:
    """A tenant's list requests go to its own rpc subject, which the service subscribes."""
    assert "memoryd.rpc.acme.memories.list" == subjects.list_memories_subject("acme")
    assert "memoryd.rpc.*.memories.list" == subjects.ALL_LIST_MEMORIES


def test_browse_subjects_put_the_tenant_where_permissions_can_grant_it() -> None:
    """A tenant's browse requests go to its own rpc subject: one grant covers all its rpcs."""
    assert "memoryd.rpc.acme.browse" == subjects.browse_subject("acme")
    assert "memoryd.rpc.*.browse" == subjects.ALL_BROWSE
    assert "acme" == subjects.rpc_tenant(subjects.browse_subject("acme"))


def test_rpc_tenant_reads_the_tenant_token_of_a_per_tenant_subject() -> None:
    """The tenant comes back from a per-tenant subject; other subjects name none."""
    assert "acme" == subjects.rpc_tenant(subjects.list_memories_subject("acme"))
    assert "acme" == subjects.rpc_tenant(subjects.recall_subject("acme"))
    assert None is subjects.rpc_tenant("memoryd.rpc.recall")
    assert None is subjects.rpc_tenant("memoryd.ev.acme.alice.turn_recorded_v1")


def test_user_event_filters_name_one_subject_per_event_type() -> None:
    """A user's events of given types are read from exactly their subjects."""
    found = subjects.user_event_filters("acme", "bob", ("memory.remembered.v1", "session.ended.v1"))

    assert [
        "memoryd.ev.acme.bob.memory_remembered_v1",
        "memoryd.ev.acme.bob.memory_remembered_v1.*",
        "memoryd.ev.acme.bob.session_ended_v1",
        "memoryd.ev.acme.bob.session_ended_v1.*",
    ] == found


def test_a_type_filter_matches_that_type_for_every_tenant_and_user() -> None:
    """A projection's consumer reads the types it folds, whoever the event belongs to."""
    event_filter = subjects.type_filter("turn.recorded.v1")

    assert "memoryd.ev.*.*.turn_recorded_v1" == event_filter
    assert subjects.subject_matches(event_filter, "memoryd.ev.acme.bob.turn_recorded_v1")
    assert not subjects.subject_matches(event_filter, "memoryd.ev.acme.bob.page_evicted_v1")
    assert not subjects.subject_matches(event_filter, "memoryd.ev.acme.turn_recorded_v1")


def test_subject_matching_follows_nats_wildcards() -> None:
    """``*`` is one token, ``>`` one or more at the end; anything else matches itself."""
    assert subjects.subject_matches("memoryd.ev.>", "memoryd.ev.acme.bob.x")
    assert not subjects.subject_matches("memoryd.ev.>", "memoryd.ev")
    assert subjects.subject_matches("memoryd.ev.acme.*.x", "memoryd.ev.acme.bob.x")
    assert not subjects.subject_matches("memoryd.ev.acme.*.x", "memoryd.ev.acme.bob.x.y")
    assert not subjects.subject_matches("memoryd.ev.acme.bob", "memoryd.ev.acme.bob.x")


def test_the_type_token_of_an_event_subject() -> None:
    """The last token of an event subject names its type; other shapes name none."""
    assert "turn_recorded_v1" == subjects.subject_type_token("memoryd.ev.acme.bob.turn_recorded_v1")
    assert None is subjects.subject_type_token("memoryd.ev.acme.turn_recorded_v1")
    assert None is subjects.subject_type_token("memoryd.notify.acme.bob.page_added")
