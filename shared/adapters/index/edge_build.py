"""Optimise a Qdrant Edge shard in another process, and the folders that make it possible.

Edge holds the GIL while it optimises (2.2 s for 12,620 points here, ~3 s per 20,000), so an
optimisation in the serving process stops every request for that long. Instead the shard is
copied (``Generations.copy``), a child process (``python -m`` this module) optimises the copy,
and the serving process loads it, replays the writes it took meanwhile, and switches to it.

A shard lives in a generation folder under the index's home (``gen-<n>``); ``CURRENT`` names the
one in use and is replaced atomically, only once the new generation holds every write. A home
from before generations holds the shard itself: it counts as generation 0. Folders that
``CURRENT`` does not name are an interrupted build: ``Generations.clean`` removes them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import qdrant_edge as qe

from memoryd.shared.adapters.index.layout import edge_config
from memoryd.shared.adapters.pages import release_shared

# Written by EdgeShard.create; its presence means the folder already holds a shard.
CONFIG_FILE = "edge_config.json"
_CURRENT = "CURRENT"
_PREFIX = "gen-"
# What Edge keeps in a shard folder (a home from before generations holds them at its top).
_SHARD_ENTRIES = frozenset({CONFIG_FILE, "segments", "wal", "temp_segments"})
# The child's exit status when the optimiser found nothing to do.
_UNCHANGED = 3
# The child's scheduling niceness: background work, as the workers' model lanes
# (``embedding_nice``), so recall's threads and the event loop get the cores first. A build
# often runs right after a burst of writes, when recalls come. With one core kept busy at
# niceness 0, a lone query on the fp32 model (2 threads) took p50 / p90 19-20 / 50 ms; kept
# busy at 10, 15-19 / 30-34 ms; idle, 12-14 / 27-33 ms (AVX2, 60 queries of 12-120 tokens).
BUILD_NICE = 10


@dataclass(frozen=True)
class Generations:
    """The shard folders under ``home``: which one is in use, the next, the stale ones."""

    home: Path

    def current(self) -> Path:
        """Return the folder of the shard in use (``home`` itself for a home without any)."""
        named = self.home / _CURRENT
        if named.exists():
            return self.home / named.read_text().strip()
        if (self.home / CONFIG_FILE).exists():
            return self.home
        return self.home / f"{_PREFIX}0"

    def next(self) -> Path:
        """Return an unused folder for the next generation (not created)."""
        return self.home / f"{_PREFIX}{self._number(self.current()) + 1}"

    def copy(self, shard: Path, target: Path) -> None:
        """Copy the shard folder ``shard`` (flushed, with no write running) to ``target``."""

        def others(folder: str, names: list[str]) -> list[str]:
            # A home from before generations holds the shard beside the folders of new ones.
            if Path(folder) != self.home:
                return []
            return [n for n in names if n not in _SHARD_ENTRIES]

        shutil.copytree(shard, target, ignore=others)

    def commit(self, folder: Path) -> None:
        """Make ``folder`` the generation in use (atomically: a crash leaves one or the other)."""
        pending = self.home / f"{_CURRENT}.next"
        pending.write_text(folder.name)
        pending.replace(self.home / _CURRENT)

    def clean(self) -> None:
        """Remove what an interrupted build or a finished switch left beside the shard in use.

        That is every ``gen-`` folder but the one in use, and, once a generation is in use, the
        shard a home from before generations kept at its top. Nothing else is touched.
        """
        current = self.current()
        for entry in self.home.iterdir():
            if entry == current:
                continue
            if entry.name.startswith(_PREFIX) or entry.name == f"{_CURRENT}.next":
                stale = True
            else:
                stale = current != self.home and entry.name in _SHARD_ENTRIES
            if stale and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            elif stale:
                entry.unlink(missing_ok=True)

    @staticmethod
    def _number(folder: Path) -> int:
        name = folder.name
        return int(name[len(_PREFIX) :]) if name.startswith(_PREFIX) else 0


@dataclass(frozen=True, slots=True)
class Built:
    """What the child did: whether the optimiser changed anything, and its peak RSS."""

    changed: bool
    peak_rss_mb: float


async def optimise_in_child(folder: Path, dimension: int, segment_points: int | None) -> Built:
    """Optimise the shard in ``folder`` in a child process; say what it did.

    Raises ``RuntimeError`` with the child's last line if it fails. Cancelled, it kills the
    child (the folder is then an interrupted build).
    """
    command = [sys.executable, "-m", __name__, str(folder), str(dimension)]
    if segment_points is not None:
        command.append(str(segment_points))
    child = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        output, errors = await child.communicate()
    except asyncio.CancelledError:
        child.kill()
        await child.wait()
        raise
    if child.returncode not in (0, _UNCHANGED):
        last = (errors.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"optimising the index copy in {folder} failed: {last}")
    peak_kb = output.decode().strip().splitlines()[-1:] or ["0"]
    return Built(changed=child.returncode == 0, peak_rss_mb=round(int(peak_kb[0]) / 1024, 1))


def _peak_rss_kb() -> int:
    """Return this process's peak RSS in KB: VmHWM where /proc has it.

    Not ``ru_maxrss``: Linux carries the parent's peak across fork and exec into it (a child of
    a 750 MB service reported ~610 MB; its own VmHWM, as `/usr/bin/time` saw it, ~300 MB).
    """
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def indexing_threads(cores: int | None) -> int:
    """Return the threads the child builds an HNSW with: half the cores, at least one.

    The service searches while the child works. On two cores, 20,000 new points at 250,000
    took the child 1.6 cores for 9.9 s with every core, and one recall caller beside it
    (100,000 turns over 100 users) ran at p50 / p99 38.4 / 80.1 ms; on one thread 0.94 cores
    for 12.7 s, the caller at 29.9 / 65.4 ms (22.5 / 41.6 with no child).
    """
    return max(1, (cores or 1) // 2)


def lower_priority(nice: int = BUILD_NICE) -> None:
    """Run this process at scheduling niceness ``nice`` (where the system has niceness)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))


def main() -> None:
    """Load the shard in the folder given, optimise it, flush and close it."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    parser.add_argument("dimension", type=int)
    parser.add_argument("segment_points", type=int, nargs="?")
    args = parser.parse_args()
    lower_priority()
    threads = indexing_threads(os.cpu_count())
    config = edge_config(args.dimension, args.segment_points, threads)
    shard = qe.EdgeShard.load(str(args.folder), config)
    # What loading read and the optimiser does not (the write-ahead log, the payload indexes'
    # files): the child's peak 319 -> 235 MB optimising a 10,000-turn shard, as fast.
    release_shared(args.folder)
    changed = shard.optimize()
    shard.flush()
    shard.close()
    print(_peak_rss_kb())
    sys.exit(0 if changed else _UNCHANGED)


if __name__ == "__main__":
    main()
