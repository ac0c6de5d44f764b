"""The SDK's notification subscriptions: start points, the consumer they ask for, live bounds."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from nats.js import api

from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import notification_stream_config
from memoryd.shared.client.notifications import LiveNotifications, consumer_config
from memoryd.shared.contracts import MemoryUpdated
from memoryd.shared.settings import Settings

FILTER = "memoryd.notify.acme.alice.>"


def note(n: int) -> MemoryUpdated:
    """Return a page.added notification numbered ``n`` (its stream_seq)."""
    return MemoryUpdated(
        kind="page.added",
        tenant="acme",
        user_id="alice",
        agent_id="default",
        session_id=None,
        event_id=uuid.uuid4(),
        stream_seq=n,
    )


def test_new_all_sequence_and_time_start_where_asked() -> None:
    """Each start point becomes the deliver policy (and option) of the consumer."""
    at = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def policy(start: object) -> tuple[object, object, object]:
        config = consumer_config(FILTER, start, durable=None, max_pending=8, ack_wait=30)  # type: ignore[arg-type]
        return config.deliver_policy, config.opt_start_seq, config.opt_start_time

    assert (api.DeliverPolicy.NEW, None, None) == policy("new")
    assert (api.DeliverPolicy.ALL, None, None) == policy("all")
    assert (api.DeliverPolicy.BY_START_SEQUENCE, 42, None) == policy(42)
    assert (api.DeliverPolicy.BY_START_TIME, None, at) == policy(at)


@pytest.mark.parametrize("start", [0, -3, "latest", datetime(2026, 1, 5, 9, 0)])
def test_a_start_point_that_names_no_position_is_refused(start: object) -> None:
    """A sequence below 1, an unknown word or a naive time raises instead of guessing."""
    with pytest.raises(ValueError, match="start"):
        consumer_config(FILTER, start, durable=None, max_pending=8, ack_wait=30)  # type: ignore[arg-type]


def test_the_consumer_bounds_what_it_hands_out_unacknowledged() -> None:
    """max_pending is the consumer's max_ack_pending; acks are explicit, on the filter asked."""
    config = consumer_config(FILTER, "all", durable="app", max_pending=16, ack_wait=12)

    assert (16, api.AckPolicy.EXPLICIT, 12, FILTER, "app") == (
        config.max_ack_pending,
        config.ack_policy,
        config.ack_wait,
        config.filter_subject,
        config.durable_name,
    )
    assert config.inactive_threshold is None  # a durable consumer stays until deleted


def test_an_unnamed_stream_subscription_expires_when_its_client_is_gone() -> None:
    """Without a durable name the consumer is removed after a while without its client."""
    config = consumer_config(FILTER, 5, durable=None, max_pending=16, ack_wait=12)
    assert config.inactive_threshold is not None and config.inactive_threshold > 0


def test_a_live_subscription_holds_at_most_max_pending_and_counts_the_rest() -> None:
    """An app that takes nothing holds max_pending notifications; the others are counted."""
    live = LiveNotifications(max_pending=3)
    for n in range(10):
        live.deliver(note(n).model_dump_json().encode())

    assert (3, 7) == (live.held(), live.dropped)


async def test_a_live_subscription_keeps_the_oldest_it_could_hold_in_order() -> None:
    """What a full live subscription keeps is the first notifications, in arrival order."""
    live = LiveNotifications(max_pending=2)
    for n in range(5):
        live.deliver(note(n).model_dump_json().encode())

    assert [0, 1] == [(await live.get()).stream_seq, (await live.get()).stream_seq]


def test_the_notification_stream_keeps_every_notify_subject_within_its_limits() -> None:
    """The stream covers all notify subjects, with the settings' age and size, oldest dropped."""
    settings = Settings(notify_max_age_seconds=3_600, notify_max_bytes=10_000_000)
    config = notification_stream_config(settings)

    assert [subjects.ALL_NOTIFICATIONS] == config.subjects
    assert (3_600, 10_000_000, api.DiscardPolicy.OLD, "MEMORYD_NOTIFY") == (
        config.max_age,
        config.max_bytes,
        config.discard,
        config.name,
    )


def test_a_live_subscription_skips_what_it_cannot_read_and_counts_it() -> None:
    """A newer kind is counted as skipped, not held, and does not take a place in the queue."""
    live = LiveNotifications(max_pending=2)
    newer = note(0).model_dump(mode="json") | {"kind": "page.touched"}
    live.deliver(json.dumps(newer).encode())
    live.deliver(b"not json")
    live.deliver(note(1).model_dump_json().encode())

    assert (1, 2, 0) == (live.held(), live.skipped, live.dropped)
