"""Build the memory-updated notification a projection emits after a change."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.notifications import (
    MemoryUpdated,
    NotificationKind,
    notification_type,
)


def notification(
    kind: NotificationKind, event: Event, sequence: int = 0, items: Iterable[uuid.UUID] = ()
) -> MemoryUpdated:
    """Describe a change caused by ``event`` (stored at ``sequence``; 0 for a derived event
    folded before the log gave it a sequence), naming the items it touched.

    The notification is the catalogue's contract of ``kind`` (``notification_type``).
    """
    return notification_type(kind)(
        kind=kind,
        tenant=event.scope.tenant,
        user_id=event.scope.user_id,
        agent_id=event.scope.agent_id,
        session_id=event.scope.session_id,
        event_id=event.event_id,
        stream_seq=sequence,
        item_ids=tuple(items),
    )
