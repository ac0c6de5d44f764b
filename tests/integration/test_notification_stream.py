"""Durable notifications on a real nats-server: resume, start points, flow control, dedup."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import ensure_streams
from memoryd.shared.adapters.nats_notify import NotificationPublisher
from memoryd.shared.client import MemoryClient
from memoryd.shared.client.notifications import Notifications
from memoryd.shared.contracts import MemoryUpdated
from memoryd.shared.settings import Settings
from tests.conftest import _delete_streams, unique

pytestmark = pytest.mark.integration

GET_TIMEOUT = 10.0


class Feed:
    """A tenant's notifications published straight into the notification stream."""

    def __init__(self, publisher: NotificationPublisher, tenant: str) -> None:
        self.publisher = publisher
        self.tenant = tenant
        self.counter = 0

    async def publish(self, count: int, users: tuple[str, ...] = ("alice", "bob")) -> None:
        """Publish ``count`` page.added notifications per user, interleaved, numbered on."""
        notes = []
        for _ in range(count):
            self.counter += 1
            notes.extend(self.note(user, self.counter) for user in users)
        await self.publisher.publish(notes)

    def note(self, user: str, n: int) -> MemoryUpdated:
        """Return notification ``n`` of ``user`` (n is its stream_seq)."""
        return MemoryUpdated(
            kind="page.added",
            tenant=self.tenant,
            user_id=user,
            agent_id="default",
            session_id=None,
            event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{self.tenant}/{user}/{n}"),
            stream_seq=n,
        )


@pytest.fixture
async def memory(nats_url: str) -> AsyncIterator[tuple[MemoryClient, Feed, Settings]]:
    """Yield a client, a feed for a fresh tenant, and the settings, on fresh streams."""
    settings = Settings(nats_url=nats_url)
    await _delete_streams(nats_url, settings)
    client = await MemoryClient.from_settings(settings)
    await ensure_streams(client._js, settings)
    feed = Feed(NotificationPublisher.from_settings(client._js, settings), unique("t"))
    yield client, feed, settings
    await client.close()
    await _delete_streams(nats_url, settings)


async def take(updates: Notifications, count: int) -> list[tuple[str, int]]:
    """Take ``count`` notifications; return each one's (user, stream_seq)."""
    taken = []
    for _ in range(count):
        note = await asyncio.wait_for(updates.get(), GET_TIMEOUT)
        taken.append((note.user_id, note.stream_seq))
    return taken


def published(counts: range, users: tuple[str, ...] = ("alice", "bob")) -> list[tuple[str, int]]:
    """Return what ``Feed.publish`` put in the stream for the numbers ``counts``, in order."""
    return [(user, n) for n in counts for user in users]


async def test_a_restarted_durable_subscriber_gets_what_it_missed_once_in_order(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """Stopped after 7 of 40 (holding more it had fetched), restarted after 40 more: all 80,
    each once, in publish order for every user."""
    client, feed, settings = memory
    await feed.publish(20)
    async with client.notifications(feed.tenant, durable="app", start="all", max_pending=5) as u:
        before = await take(u, 7)
        assert 0 < u.held()  # it had fetched notifications it never handed out
    await feed.publish(20)  # while the subscriber is down

    async with client.notifications(feed.tenant, durable="app", max_pending=5) as u:
        after = await take(u, 80 - 7)
    info = await client._js.consumer_info(settings.notify_stream_name, "app")

    assert published(range(1, 41)) == before + after
    assert (0, 0) == (info.num_pending, info.num_ack_pending)  # nothing more to come


async def test_a_durable_subscription_follows_one_user_only(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """A subscription for one user resumes over that user's notifications alone."""
    client, feed, _ = memory
    await feed.publish(3)
    async with client.notifications(feed.tenant, "bob", durable="bob-app", start="all") as u:
        first = await take(u, 2)
    await feed.publish(2)
    async with client.notifications(feed.tenant, "bob", durable="bob-app") as u:
        rest = await take(u, 3)

    assert published(range(1, 6), ("bob",)) == first + rest


async def test_a_slow_consumer_holds_at_most_max_pending(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """With 60 notifications waiting, the server hands out max_pending, the client holds no
    more, and the rest wait in the stream until asked for."""
    client, feed, settings = memory
    await feed.publish(30)
    async with client.notifications(feed.tenant, durable="slow", start="all", max_pending=4) as u:
        first = await take(u, 1)
        info = await client._js.consumer_info(settings.notify_stream_name, "slow")
        held = u.held()
        rest = await take(u, 59)

    assert held <= 3
    assert info.num_ack_pending <= 4
    assert 60 - 4 <= info.num_pending
    assert published(range(1, 31)) == first + rest


async def test_a_subscription_starts_at_a_sequence_or_a_time(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """From a notification stream sequence, or from a time, the first one is the one asked."""
    client, feed, _ = memory
    await feed.publish(3, ("alice",))
    middle = datetime.now(UTC)
    await feed.publish(3, ("alice",))
    async with client.notifications(feed.tenant, start="all") as u:
        await take(u, 4)
        fourth = u.sequence
    assert fourth is not None

    async with client.notifications(feed.tenant, start=fourth) as u:
        from_sequence = await take(u, 3)
    async with client.notifications(feed.tenant, start=middle) as u:
        from_time = await take(u, 3)

    assert published(range(4, 7), ("alice",)) == from_sequence == from_time


async def test_an_unnamed_stream_subscription_leaves_no_consumer(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """Replaying from a start point without a durable name removes its consumer at the end."""
    client, feed, settings = memory
    await feed.publish(2)
    async with client.notifications(feed.tenant, start="all") as u:
        await take(u, 1)
        during = (await client._js.stream_info(settings.notify_stream_name)).state.consumer_count

    after = (await client._js.stream_info(settings.notify_stream_name)).state.consumer_count
    assert (1, 0) == (during, after)


async def test_a_notification_published_twice_is_stored_once(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """The same change notified again (a batch retried) is one notification in the stream."""
    client, feed, settings = memory
    note = feed.note("alice", 1)
    await feed.publisher.publish([note])
    await feed.publisher.publish([note])

    info = await client._js.stream_info(settings.notify_stream_name)
    assert 1 == info.state.messages


async def test_a_notification_the_app_failed_on_comes_again_first(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """Leaving with an error while handling the third: the next subscription starts with it."""
    client, feed, _ = memory
    await feed.publish(5, ("alice",))
    with pytest.raises(RuntimeError):
        async with client.notifications(feed.tenant, durable="app", start="all") as u:
            handled = await take(u, 3)
            raise RuntimeError("the app failed on the third")
    async with client.notifications(feed.tenant, durable="app") as u:
        again = await take(u, 3)

    assert published(range(1, 6), ("alice",)) == handled[:2] + again


async def test_a_durable_name_resumed_for_another_user_is_refused(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """A durable subscription follows the tenant or user it was made for, or raises."""
    client, feed, _ = memory
    async with client.notifications(feed.tenant, "alice", durable="app", start="all"):
        pass

    with pytest.raises(ValueError, match="follows"):
        async with client.notifications(feed.tenant, "bob", durable="app"):
            pass


async def publish_unreadable(client: MemoryClient, feed: Feed, settings: Settings) -> None:
    """Store a notification of a kind this SDK does not know (as a newer server might)."""
    newer = feed.note("alice", 0).model_dump(mode="json") | {"kind": "page.touched"}
    await client._js.publish(
        subjects.notify_subject(feed.tenant, "alice", "page.touched"),
        json.dumps(newer).encode(),
        stream=settings.notify_stream_name,
    )


async def test_a_notification_the_sdk_cannot_read_is_skipped_and_never_blocks_the_stream(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """An unknown kind between two readable notifications is counted and passed over, and a
    resumed durable subscriber is not handed it again."""
    client, feed, settings = memory
    await feed.publish(1, users=("alice",))
    await publish_unreadable(client, feed, settings)
    await feed.publish(1, users=("alice",))
    async with client.notifications(feed.tenant, durable="app", start="all") as updates:
        taken = await take(updates, 2)
        skipped = updates.skipped
    info = await client._js.consumer_info(settings.notify_stream_name, "app")

    assert ([("alice", 1), ("alice", 2)], 1) == (taken, skipped)
    assert (0, 0) == (info.num_pending, info.num_ack_pending)


async def test_a_live_subscriber_skips_a_notification_it_cannot_read(
    memory: tuple[MemoryClient, Feed, Settings],
) -> None:
    """A live subscription counts an unknown kind as skipped and still gets the next one."""
    client, feed, settings = memory
    async with client.notifications(feed.tenant) as updates:
        await publish_unreadable(client, feed, settings)
        await feed.publish(1, users=("alice",))
        taken = await take(updates, 1)

        assert ([("alice", 1)], 1) == (taken, updates.skipped)
