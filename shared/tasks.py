"""Small helpers for asyncio tasks whose outcome nobody awaits."""

import asyncio
from typing import Any

__all__ = ["outcome_read"]


def outcome_read(future: asyncio.Future[Any]) -> None:
    """Read a future's outcome, so asyncio reports no exception as never retrieved.

    For a task left to finish on its own (a model load a failed start no longer needs, an
    early embedding whose waiters get its error): pass it to ``add_done_callback``.
    """
    if not future.cancelled():
        future.exception()
