"""Progress for people at a terminal: a bar per task on stderr when it is one, else nothing.

Long commands (replay, export, import, the benchmarks) tell a ``Progress`` how far each task
has come; the command decides whether anyone is watching, so tests and logs stay clean.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager

from nats.js import JetStreamContext
from rich.console import Console
from rich.progress import Progress as Bars
from rich.progress import TaskID

from memoryd.services.runtime.replay import acked_position
from memoryd.shared.adapters.nats_log import last_sequence
from memoryd.shared.tasks import cancelled

# Told (task, done, total) as the work goes; a task is named the first time it is told.
Progress = Callable[[str, int, int], None]


def quiet(_task: str, _done: int, _total: int) -> None:
    """Tell nobody (no terminal is watching)."""


@contextmanager
def terminal_progress(console: Console | None = None) -> Iterator[Progress]:
    """Yield a ``Progress`` that draws a bar per task when ``console`` (stderr) is a terminal.

    The bars are cleared when the block ends, leaving the terminal to the command's summary.
    """
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield quiet
        return
    with Bars(console=console, transient=True) as bars:
        tasks: dict[str, TaskID] = {}

        def tell(task: str, done: int, total: int) -> None:
            if task not in tasks:
                tasks[task] = bars.add_task(task, total=total)
            bars.update(tasks[task], completed=done, total=total)

        yield tell


@asynccontextmanager
async def watching_consumers(
    js: JetStreamContext,
    stream: str,
    consumers: Sequence[str],
    *,
    task: str,
    progress: Progress,
    every: float = 0.5,
) -> AsyncIterator[None]:
    """Tell ``progress`` how far the slowest consumer has applied the log, while the block runs.

    For waits that take minutes (workers applying a bulk load). With nobody watching
    (``quiet``) nothing is asked of NATS.
    """
    if progress is quiet:
        yield
        return

    async def watch() -> None:
        while True:
            # A bar that misses a beat (NATS busy, a consumer not made yet) is no failure.
            with contextlib.suppress(Exception):
                floors = [await acked_position(js, stream, name) for name in consumers]
                progress(task, min(floors, default=0), await last_sequence(js, stream))
            await asyncio.sleep(every)

    watcher = asyncio.create_task(watch())
    try:
        yield
    finally:
        await cancelled(watcher)
    last = await last_sequence(js, stream)  # the wait is over: every consumer is through
    progress(task, last, last)
