"""Small helpers for asyncio tasks: one whose outcome nobody awaits, one that must end."""

import asyncio
import contextlib
from typing import Any

__all__ = ["cancelled", "outcome_read"]


def outcome_read(future: asyncio.Future[Any]) -> None:
    """Read a future's outcome, so asyncio reports no exception as never retrieved.

    For a task left to finish on its own (a model load a failed start no longer needs, an
    early embedding whose waiters get its error): pass it to ``add_done_callback``.
    """
    if not future.cancelled():
        future.exception()


async def cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` again until it has ended, and return once it has.

    Not ``task.cancel(); await task``: before Python 3.12 a cancellation that lands as the
    task's own inner wait completes is lost (CPython gh-86296), and nats-py waits on its
    replies that way; a loop that asks NATS again then goes on, and its awaiter waits for
    ever (a lease ticker's stop hung a fault test for 300 s so).
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=0.1)
    if not task.cancelled():
        with contextlib.suppress(Exception):
            task.result()  # retrieved: it failed while being cancelled, which is the answer
