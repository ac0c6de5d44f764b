"""Where an Edge index's shards run: in this process, or in a child process, the index host.

Qdrant Edge holds the GIL while it searches and writes, so in the serving process every
search stops the event loop for as long as the engine works (a quarter of the loop's time
under load here, docs/performance.md). ``HostedShards`` runs the engine in a child process
(``python -m`` this module) and talks to it over a socket: the loop sends an operation
(``edge_engine``) and goes on with other requests while the child, on the other core, works;
the child answers in the order it was asked. ``InlineShards`` runs the same operations here:
reads on the loop, long ones (writes, flushes, opening) in a worker thread.

The child ends when its socket closes: when the index is closed (it flushes and releases every
shard first), or when the serving process dies. It ignores Ctrl-C (the terminal sends it to
the whole process group): the serving process closes it in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import signal
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from memoryd.shared.adapters.index.edge_engine import Engine, Opened, Operation, ShardSpec

__all__ = ["HostExited", "HostedShards", "InlineShards", "Shards"]

R = TypeVar("R")
_FRAME = struct.Struct("<I")
_PICKLE = pickle.HIGHEST_PROTOCOL
# What the child may be asked besides an operation on a shard.
_OPEN = "open"
_CLOSE = "close"
# A host asked to stop finishes what it was doing and flushes every shard; past this it is
# killed (the shard's write-ahead log holds every write it answered).
STOP_SECONDS = 120.0


class Shards(Protocol):
    """Open shards and apply operations to them, somewhere."""

    async def open(self, spec: ShardSpec) -> Opened:
        """Load or create the shard ``spec`` describes."""
        ...

    async def run(self, handle: int, operation: Operation[R]) -> R:
        """Apply the operation to an open shard and return its answer."""
        ...

    async def close(self, handle: int) -> None:
        """Flush a shard and release it."""
        ...

    async def stop(self) -> None:
        """Flush and release every shard; nothing can be asked after."""
        ...


class InlineShards:
    """The engine in this process: reads on the event loop, long operations in a thread.

    On the loop, since the engine holds the GIL while it reads: a thread only adds two
    hand-offs (the BM25 search took 1.3-1.6 ms on the loop against 4.1-4.6 in a thread, in
    recall at 5,000 turns here).
    """

    def __init__(self) -> None:
        """Hold an engine with no shard open."""
        self._engine = Engine()

    async def open(self, spec: ShardSpec) -> Opened:
        """Load or create the shard in a worker thread."""
        return await asyncio.to_thread(self._engine.open, spec)

    async def run(self, handle: int, operation: Operation[R]) -> R:
        """Apply a read here and now, a long operation in a worker thread."""
        if operation.long:
            return await asyncio.to_thread(self._engine.run, handle, operation)
        return self._engine.run(handle, operation)

    async def close(self, handle: int) -> None:
        """Flush and release the shard in a worker thread."""
        await asyncio.to_thread(self._engine.close, handle)

    async def stop(self) -> None:
        """Flush and release every shard."""
        await asyncio.to_thread(self._engine.close_all)


class HostExited(RuntimeError):
    """The index host is gone: what was asked of it has no answer."""


class HostedShards:
    """The engine in a child process, asked over a socket; answers arrive in order asked.

    Start it with ``start()``. An error the engine raises comes back as the same exception
    (or, if it cannot travel, as a ``RuntimeError`` saying what it was). If the child dies,
    every pending and later call raises ``HostExited``.
    """

    def __init__(self) -> None:
        """Describe a host not started yet."""
        self._process: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._asked = 0
        self._gone: str | None = None  # why nothing more can be asked

    async def start(self) -> None:
        """Spawn the child and connect to it."""
        ours, theirs = socket.socketpair()
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                __name__,
                str(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        self._reading = asyncio.create_task(self._read(reader))

    @property
    def pid(self) -> int | None:
        """Return the child's process id (None: not started)."""
        return None if self._process is None else self._process.pid

    async def open(self, spec: ShardSpec) -> Opened:
        """Load or create the shard in the child."""
        opened: Opened = await self._ask((_OPEN, spec))
        return opened

    async def run(self, handle: int, operation: Operation[R]) -> R:
        """Apply the operation in the child."""
        answer: R = await self._ask((handle, operation))
        return answer

    async def close(self, handle: int) -> None:
        """Flush and release the shard in the child."""
        await self._ask((_CLOSE, handle))

    async def stop(self) -> None:
        """Close the socket: the child flushes and releases every shard, then exits (killed if
        it has not after ``STOP_SECONDS``)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        if self._process is not None:
            try:
                await asyncio.wait_for(self._process.wait(), STOP_SECONDS)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        if self._reading is not None:
            await asyncio.gather(self._reading, return_exceptions=True)

    async def _ask(self, message: tuple[Any, Any]) -> Any:
        if self._gone is not None:
            raise HostExited(self._gone)
        if self._writer is None:
            raise RuntimeError("the index host is not running: call start() first")
        self._asked += 1
        asked = self._asked
        answer = asyncio.get_running_loop().create_future()
        self._pending[asked] = answer
        body = pickle.dumps((asked, *message), _PICKLE)
        self._writer.write(_FRAME.pack(len(body)) + body)
        with contextlib.suppress(ConnectionError):  # the reader fails it with HostExited
            await self._writer.drain()
        return await answer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """Hand each answer to its caller; when the child goes, fail every call left."""
        try:
            while True:
                head = await reader.readexactly(_FRAME.size)
                asked, ok, value = pickle.loads(await reader.readexactly(*_FRAME.unpack(head)))
                answer = self._pending.pop(asked)
                if answer.done():  # its caller was cancelled
                    continue
                if ok:
                    answer.set_result(value)
                else:
                    answer.set_exception(value)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            status = None if self._process is None else await self._process.wait()
            self._gone = f"the index host exited (status {status})"
            for answer in self._pending.values():
                if not answer.done():
                    answer.set_exception(HostExited(self._gone))
            self._pending.clear()


def _travelling(error: BaseException) -> BaseException:
    """Return the error itself if it pickles, else a RuntimeError that says what it was."""
    try:
        pickle.dumps(error, _PICKLE)
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")
    return error


def serve(connection: socket.socket) -> None:
    """Answer what arrives on ``connection`` until it closes, then release every shard."""
    engine = Engine()
    requests = connection.makefile("rb")
    answers = connection.makefile("wb")
    handlers: dict[Any, Callable[[Any], Any]] = {_OPEN: engine.open, _CLOSE: engine.close}
    try:
        while len(head := requests.read(_FRAME.size)) == _FRAME.size:
            (size,) = _FRAME.unpack(head)
            body = requests.read(size)
            if len(body) < size:
                break  # the serving process died while it wrote
            asked, target, argument = pickle.loads(body)
            try:
                handler = handlers.get(target) if isinstance(target, str) else None
                if handler is not None:
                    value, ok = handler(argument), True
                else:
                    value, ok = engine.run(target, argument), True
            except Exception as error:
                value, ok = _travelling(error), False
            body = pickle.dumps((asked, ok, value), _PICKLE)
            answers.write(_FRAME.pack(len(body)) + body)
            answers.flush()
    except (ConnectionError, BrokenPipeError):
        pass
    finally:
        engine.close_all()


def main() -> None:
    """Serve the socket whose descriptor is the one argument."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    descriptor = int(sys.argv[1])
    with socket.socket(fileno=descriptor) as connection:
        serve(connection)


if __name__ == "__main__":
    main()
