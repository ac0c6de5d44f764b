"""Letting go of the resident pages of files a process maps but has stopped reading (Linux).

A page of a mapped file counts in the resident set of every process that has touched it, for as
long as the mapping lasts, though the process may never read it again: Qdrant Edge reads a
shard's whole write-ahead log and its payload indexes' files when it loads the shard, then
works from what it built in memory. ``MADV_DONTNEED`` takes such pages out of the process's
resident set and leaves them in the page cache: a page read again comes back from there (or from
the file), with what was last written to it. That holds for a shared mapping, and for a private
one only where no page is a private copy the process wrote to (``Area.written_kb``), which dropping
would lose. And of the C heap's free pages (``trim_heap``), which malloc keeps after a native
library frees its buffers.

Only what stdlib gives is imported here: the optimising child (``index.edge_build``) uses it.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SMAPS = Path("/proc/self/smaps")
MAPS = Path("/proc/self/maps")  # the same areas, without the pages' figures
# An area's first line: start-end perms offset device inode [path]
_AREA = re.compile(r"([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+ *(.*)")


@dataclass(frozen=True, slots=True)
class Area:
    """One area of this process's mappings: its addresses, whether it is shared, the file it
    maps ("" for none), its resident kB and the kB that are private copies of pages written to."""

    start: int
    end: int
    shared: bool
    path: str
    rss_kb: int = 0
    written_kb: int = 0


def areas(smaps: Path = SMAPS) -> list[Area] | None:
    """Return this process's mapped areas (None: Linux's view of them is not to be had); from
    ``MAPS``, without their resident and written kB."""
    try:
        lines = smaps.read_text().splitlines()
    except OSError:
        return None
    found: list[Area] = []
    start = end = 0
    shared, path, rss, written = False, "", 0, 0
    for line in lines:
        head = _AREA.fullmatch(line)
        if head is not None:
            if end:
                found.append(Area(start, end, shared, path, rss, written))
            start, end = int(head[1], 16), int(head[2], 16)
            shared, path, rss, written = head[3][3] == "s", head[4], 0, 0
        elif line.startswith("Rss:"):
            rss = int(line.split()[1])
        elif line.startswith("Anonymous:"):
            written = int(line.split()[1])
    if end:
        found.append(Area(start, end, shared, path, rss, written))
    return found


def release_shared(folder: Path, maps: Path = MAPS) -> int:
    """Take the pages of every file under ``folder`` this process maps shared out of its
    resident set; return how many bytes of mappings that covered (0 where this cannot be done
    here). Reads ``/proc/self/maps``, which Linux writes without walking the pages: 1.1 ms
    for the index host's 340 areas, against 5.5 ms for its ``smaps``."""
    prefix = f"{folder.resolve()}/"
    return _drop(area for area in areas(maps) or () if area.shared and area.path.startswith(prefix))


def release_file(path: Path, smaps: Path = SMAPS) -> int:
    """Take the pages of this process's mappings of ``path`` out of its resident set, but
    those of a private mapping holding a page written to; return how many bytes of mappings
    that covered (0 where this cannot be done here).

    For a model's weights file, which a runtime maps read-only and reads rows of (a Gather's
    word embeddings): the pages the texts so far have touched stay resident, each mapping
    counting its own, until let go of; the next reads take theirs back from the page cache.
    Reads ``smaps`` (a few ms): for an idle moment.
    """
    name = str(path.resolve())
    return _drop(
        area
        for area in areas(smaps) or ()
        if area.path == name and (area.shared or area.written_kb == 0)
    )


def _drop(held: Iterable[Area]) -> int:
    """Take the areas' pages out of the resident set; return the bytes that covered."""
    madvise = _madvise()
    if madvise is None:
        return 0
    released = 0
    for area in held:
        if madvise(area.start, area.end - area.start, mmap.MADV_DONTNEED) == 0:
            released += area.end - area.start
    return released


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``); say whether
    this could be done here.

    Memory a native library frees (an inference engine's buffers) mostly goes back to malloc's
    arenas, not to the system, and stays in the resident set. Trimming walks every arena while
    holding its lock (10-18 ms after a model's buffers were freed here): for a quiet moment,
    not for every request.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Any | None:
    """Return glibc's ``malloc_trim`` (None: another C library, or not Linux)."""
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_size_t,)
    function.restype = ctypes.c_int
    return function


@functools.cache
def _madvise() -> Any | None:
    """Return libc's ``madvise`` (None: not on this platform)."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    function.restype = ctypes.c_int
    return function
