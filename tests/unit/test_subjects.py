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
