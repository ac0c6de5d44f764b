"""Tell an outage (NATS or the database away for a while) from a fault of the message.

A worker retries an outage in place for as long as it lasts and never parks the message for
it: the message did nothing wrong, and parking it would lose the event for every read model
that folds it later. Everything else counts toward the attempts that park a message.
"""

from __future__ import annotations

import nats.errors
import nats.js.errors
from sqlalchemy import exc as sql_errors

from memoryd.shared.adapters.nats_log import PublishFailed

_NATS_OUTAGES = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.UnexpectedEOF,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    PublishFailed,
)
_SQL_OUTAGES = (sql_errors.OperationalError, sql_errors.InterfaceError, sql_errors.TimeoutError)


def is_outage(error: BaseException) -> bool:
    """Return whether ``error`` (or what caused it) is NATS or the database being away."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (*_NATS_OUTAGES, *_SQL_OUTAGES, ConnectionError, TimeoutError)):
            return True
        if isinstance(current, sql_errors.DBAPIError) and current.connection_invalidated:
            return True
        current = current.__cause__  # what a driver error was raised from (SQLAlchemy's wraps)
    return False
