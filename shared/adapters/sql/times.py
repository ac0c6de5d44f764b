"""Datetimes read back from SQL: SQLite returns them naive, and they were stored in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def stored_utc(at: datetime) -> datetime:
    """Return a datetime read from a read model as an aware UTC one.

    Every time memoryd writes is aware UTC; SQLite keeps no offset and hands it back naive,
    so a naive value read back is UTC and then compares right with an aware one.
    """
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
