"""Progress for people at a terminal: a bar per task on stderr when it is one, else nothing.

Long commands (replay, export, import, the benchmarks) tell a ``Progress`` how far each task
has come; the command decides whether anyone is watching, so tests and logs stay clean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress as Bars
from rich.progress import TaskID

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
