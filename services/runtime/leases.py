"""Replicas share a partitioned log: each partition's consumer is run by one replica at a time.

Every process that runs a projection of a partitioned log is a member of that projection's
group, and holds some of its partitions as leases in a JetStream key-value bucket whose
entries expire after ``ttl`` seconds unless renewed. Each ``tick`` (a third of ``ttl``):

- a member renews its membership and its leases; a lease it failed to renew is lost and its
  worker stopped (another member may hold it already);
- it counts the live members of each group and takes its share, ``ceil(partitions /
  members)``: free partitions up to that share (a create that fails means another member
  took it first), and it releases what it holds beyond it, so a member that joins gets work.

A member that dies stops renewing: its leases expire after ``ttl`` and the others take them
on their next tick, so a partition is taken over within ``ttl`` plus one tick. A member
started again under the same name (``holder``, MEMORYD_REPLICA_NAME) finds its previous run's
leases under its name and takes them back at once. A member that
stalled past its lease and wakes up may still apply a batch beside the new holder: the
tracking row is read under a row lock in the change's transaction, so whichever commits
second applies only what the first did not (order and exactly-once hold; the work is done
twice at most).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from nats.js import JetStreamContext, api
from nats.js.errors import (
    BadRequestError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
)
from nats.js.kv import KeyValue

from memoryd.shared.adapters.outages import is_outage
from memoryd.shared.tasks import cancelled

log = structlog.get_logger(__name__)

MEMBER_PREFIX = "member"


async def holders(kv: KeyValue, keys: Sequence[str]) -> dict[str, str]:
    """Return who holds each of ``keys`` that holds a value now (not deleted, not expired).
    Each is read by itself: listing keys makes a consumer that outlives the call."""
    found = {}
    for key in keys:
        with contextlib.suppress(KeyNotFoundError, KeyDeletedError):
            found[key] = ((await kv.get(key)).value or b"").decode()
    return found


def new_holder() -> str:
    """Return a member name of its own (a replica that was given none)."""
    return uuid.uuid4().hex


def bucket_of(stream: str) -> str:
    """Return the key-value bucket of the leases on ``stream``'s partitions."""
    return f"{stream}_leases"


class Running(Protocol):
    """A worker a lease started: stopped when the lease is lost or released."""

    async def stop(self) -> None:
        """Stop working (what is in hand is finished or left to redelivery)."""


@dataclass(frozen=True)
class Lane:
    """A consumer one replica at a time may run: its name (the lease key) and its group."""

    name: str
    group: str
    start: Callable[[], Awaitable[Running]]


@dataclass(frozen=True)
class Moves:
    """What a member does this tick: the lanes to take (if free) and to release."""

    take: tuple[str, ...] = ()
    release: tuple[str, ...] = ()


def plan(
    lanes: Mapping[str, Sequence[str]],
    held: set[str],
    taken: set[str],
    members: Mapping[str, int],
) -> Moves:
    """Decide a member's moves: per group, hold ``ceil(lanes / members)`` of its lanes.

    ``held`` are this member's leases, ``taken`` every lane somebody holds; a group this
    member belongs to counts at least this member.
    """
    take: list[str] = []
    release: list[str] = []
    for group, names in lanes.items():
        share = math.ceil(len(names) / max(members.get(group, 0), 1))
        mine = [name for name in names if name in held]
        if len(mine) > share:
            release += mine[share:]
        else:
            free = [name for name in names if name not in taken]
            take += free[: share - len(mine)]
    return Moves(tuple(take), tuple(release))


@dataclass
class Leases:
    """This process's memberships and leases, renewed each tick; workers follow the leases."""

    js: JetStreamContext
    bucket: str
    lanes: Sequence[Lane]
    ttl: float
    replicas: int = 1  # the bucket's, as the log's: one node lost keeps the leases
    holder: str = field(default_factory=new_holder)
    _kv: KeyValue | None = None
    _held: dict[str, tuple[int, Running]] = field(default_factory=dict)  # name -> (rev, worker)
    _member_revisions: dict[str, int] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    @property
    def held(self) -> set[str]:
        """Return the lanes this process runs now."""
        return set(self._held)

    async def start(self, patience: float = 60.0) -> None:
        """Open the bucket, take a first share, and keep ticking until stopped.

        A bucket just made on a cluster has no leader for a moment (its first writes get no
        response): an outage is asked again for up to ``patience`` seconds.
        """
        deadline = time.monotonic() + patience
        while True:
            try:
                self._kv = self._kv or await self._bucket()
                await self.tick()
                break
            except Exception as error:
                if not is_outage(error) or time.monotonic() > deadline:
                    raise
                log.warning("leases_not_ready", error=f"{type(error).__name__}: {error}")
                await asyncio.sleep(0.5)
        self._task = asyncio.create_task(self._every_tick(), name="leases")

    async def _bucket(self) -> KeyValue:
        """Open the bucket, making it on first use; the lease time is the bucket's (every
        replica must renew within the same time), whatever this process was configured."""
        config = api.KeyValueConfig(
            bucket=self.bucket, ttl=self.ttl, history=1, replicas=self.replicas
        )
        try:
            return await self.js.create_key_value(config=config)
        except BadRequestError:  # made already, with another lease time
            kv = await self.js.key_value(self.bucket)
            made = (await kv.status()).ttl or self.ttl
            log.warning("lease_time_of_the_bucket", configured=self.ttl, used=made)
            self.ttl = made
            return kv

    async def _every_tick(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.tick()
            except Exception as error:  # NATS away: the next tick tries again
                log.warning("leases_tick_failed", error=f"{type(error).__name__}: {error}")

    async def tick(self) -> None:
        """Renew, count the members, then take and release toward this member's share."""
        kv = self._opened()
        for group in {lane.group for lane in self.lanes}:
            await self._renew_membership(kv, group)
        for name in list(self._held):
            await self._renew(kv, name)
        members: dict[str, int] = {}
        for key in await holders(kv, await self._member_keys()):
            group = key.split(".")[1]
            members[group] = members.get(group, 0) + 1
        by_group: dict[str, list[str]] = {}
        for lane in self.lanes:
            by_group.setdefault(lane.group, []).append(lane.name)
        held_by = await holders(kv, [lane.name for lane in self.lanes])
        # A lease under this member's name that it does not run is its previous run's: free.
        taken = {name for name, who in held_by.items() if who != self.holder or name in self._held}
        moves = plan(by_group, set(self._held), taken, members)
        for name in moves.release:
            await self._release(kv, name)
        for name in moves.take:
            await self._take(kv, name)
        for name, who in held_by.items():  # the previous run's, beyond this member's share
            if who == self.holder and name not in self._held:
                with contextlib.suppress(KeyWrongLastSequenceError, KeyNotFoundError):
                    await kv.delete(name)
                    log.info("lease_given_back", lane=name, holder=self.holder)

    async def _member_keys(self) -> list[str]:
        """Return the member keys the bucket has messages for (live or deleted)."""
        prefix = f"$KV.{self.bucket}."
        info = await self.js.stream_info(
            f"KV_{self.bucket}", subjects_filter=f"{prefix}{MEMBER_PREFIX}.>"
        )
        return [subject.removeprefix(prefix) for subject in info.state.subjects or {}]

    async def _adopt(self, kv: KeyValue, name: str) -> int | None:
        """Take back a lease this member's previous run held (the revision), else None."""
        with contextlib.suppress(KeyNotFoundError, KeyDeletedError, KeyWrongLastSequenceError):
            entry = await kv.get(name)
            if entry.value == self.holder.encode() and entry.revision is not None:
                revision: int = await kv.update(name, self.holder.encode(), last=entry.revision)
                log.info("lease_taken_back", lane=name, holder=self.holder)
                return revision
        return None

    async def _renew_membership(self, kv: KeyValue, group: str) -> None:
        key = f"{MEMBER_PREFIX}.{group}.{self.holder}"
        self._member_revisions[key] = await kv.put(key, self.holder.encode())

    async def _renew(self, kv: KeyValue, name: str) -> None:
        revision, worker = self._held[name]
        try:
            self._held[name] = (await kv.update(name, self.holder.encode(), last=revision), worker)
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            log.warning("lease_lost", lane=name)
            del self._held[name]
            await worker.stop()

    async def _take(self, kv: KeyValue, name: str) -> None:
        try:
            revision = await kv.create(name, self.holder.encode())
        except KeyNotFoundError:
            # Another member's lease was there when the create was refused and had lapsed when
            # nats-py read it back: free now, taken on the next tick (not a reason to exit).
            log.info("lease_lapsed_while_taken", lane=name, holder=self.holder)
            return
        except KeyWrongLastSequenceError:
            adopted = await self._adopt(kv, name)
            if adopted is None:
                return  # another member took it first
            revision = adopted
        lane = next(lane for lane in self.lanes if lane.name == name)
        try:
            worker = await lane.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await kv.delete(name, last=revision)
            raise
        self._held[name] = (revision, worker)
        log.info("lease_taken", lane=name, holder=self.holder)

    async def _release(self, kv: KeyValue, name: str) -> None:
        revision, worker = self._held.pop(name)
        await worker.stop()
        with contextlib.suppress(KeyWrongLastSequenceError, KeyNotFoundError):
            await kv.delete(name, last=revision)
        log.info("lease_released", lane=name, holder=self.holder)

    async def stop(self) -> None:
        """Stop ticking; stop every worker and give its lease back (the others take it now)."""
        if self._task is not None:
            await cancelled(self._task)  # a cancellation a NATS request lost is asked again
        kv = self._kv
        if kv is None:
            return
        for name in list(self._held):
            with contextlib.suppress(Exception):  # NATS away: the lease expires instead
                await self._release(kv, name)
        for key in self._member_revisions:
            with contextlib.suppress(Exception):
                await kv.delete(key)

    def _opened(self) -> KeyValue:
        if self._kv is None:
            raise RuntimeError("leases not started")
        return self._kv
