"""Reading this process's mappings and letting go of the resident pages of mapped files."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import mmap
import sys
from pathlib import Path

import pytest

from memoryd.shared.adapters.pages import (
    areas,
    release_file,
    release_shared,
    trim_heap,
)
from tests.proc import anonymous_kb

linux = pytest.mark.skipif(sys.platform != "linux", reason="Linux's /proc/self/smaps")


def _smaps(tmp_path: Path, blob: Path) -> Path:
    smaps = tmp_path / "smaps"
    smaps.write_text(
        f"7f00-7f10 rw-p 00000000 fe:00 1234  {blob}\nRss: 64 kB\nAnonymous: 8 kB\n"
        f"7f10-7f20 rw-p 00010000 fe:00 1234  {blob}\nRss: 64 kB\nAnonymous: 4 kB\n"
        "7f20-7f30 rw-p 00000000 00:00 0 \nRss: 64 kB\nAnonymous: 64 kB\n"
        "7f30-7f40 rw-s 00000000 fe:00 99  /data/index/wal/open-1\nRss: 16 kB\n"
        "VmFlags: rd wr sh mr mw me ms sd\n"
    )
    return smaps


def test_areas_are_read_with_their_file_sharing_and_resident_and_written_pages(
    tmp_path: Path,
) -> None:
    """Each area: its addresses, whether it is shared, the file, resident and written kB."""
    blob = tmp_path / "m.blob"

    found = areas(_smaps(tmp_path, blob))

    assert [
        (0x7F00, 0x7F10, False, str(blob), 64, 8),
        (0x7F10, 0x7F20, False, str(blob), 64, 4),
        (0x7F20, 0x7F30, False, "", 64, 64),
        (0x7F30, 0x7F40, True, "/data/index/wal/open-1", 16, 0),
    ] == [(a.start, a.end, a.shared, a.path, a.rss_kb, a.written_kb) for a in found or ()]
    assert areas(tmp_path / "absent") is None


@linux
def test_released_pages_leave_the_resident_set_and_read_back_as_last_written(
    tmp_path: Path,
) -> None:
    """A file mapped shared, read whole and partly written through the mapping: released,
    none of it is resident, and reading it again gives every byte as last written; a file
    outside the folder keeps its pages."""
    (tmp_path / "shard").mkdir()
    inside, outside = tmp_path / "shard" / "wal", tmp_path / "elsewhere"
    size = 64 * mmap.PAGESIZE
    for path in (inside, outside):
        path.write_bytes(bytes(range(256)) * (size // 256))
    with inside.open("r+b") as a, outside.open("r+b") as b:
        held, other = mmap.mmap(a.fileno(), size), mmap.mmap(b.fileno(), size)
    expected = bytearray(held[:])
    held[size // 2 : size // 2 + 5] = b"newer"  # a dirty page, not yet written back
    expected[size // 2 : size // 2 + 5] = b"newer"
    _ = other[:]

    released = release_shared(tmp_path / "shard")

    resident = {area.path: area.rss_kb for area in areas() or ()}
    assert size == released
    assert 0 == resident[str(inside)]
    assert size // 1024 == resident[str(outside)]
    assert bytes(expected) == held[:]
    held.close()
    other.close()


@linux
def test_a_file_mapped_to_be_read_lets_go_of_its_pages_but_not_of_pages_written_to(
    tmp_path: Path,
) -> None:
    """Two read-only mappings of a weights file, read whole: released, neither holds a page,
    and they read the same bytes again. A private mapping written to keeps its pages (dropping
    them would lose the write); another file keeps its own."""
    weights, other = tmp_path / "model.onnx.data", tmp_path / "other.data"
    size = 64 * mmap.PAGESIZE
    for path in (weights, other):
        path.write_bytes(bytes(range(256)) * (size // 256))
    with weights.open("rb") as a, other.open("rb") as b:
        first, second = (mmap.mmap(a.fileno(), size, access=mmap.ACCESS_READ) for _ in "12")
        written = mmap.mmap(a.fileno(), size, access=mmap.ACCESS_COPY)
        kept = mmap.mmap(b.fileno(), size, access=mmap.ACCESS_READ)
    for mapping in (first, second, written, kept):
        _ = mapping[:]
    written[:5] = b"newer"

    released = release_file(weights)

    resident = [(area.path, area.rss_kb) for area in areas() or () if area.rss_kb]
    assert 2 * size == released
    assert [size // 1024] == [kb for path, kb in resident if path == str(other)]
    assert [size // 1024] == [kb for path, kb in resident if path == str(weights)]  # written
    assert weights.read_bytes() == first[:] == second[:]
    assert b"newer" == written[:5]
    for mapping in (first, second, written, kept):
        mapping.close()


@linux
def test_trimming_the_heap_gives_its_free_pages_back() -> None:
    """Freed between live blocks, the heap's pages stay resident until trimmed."""
    if not trim_heap():
        pytest.skip("not glibc: no malloc_trim")
    blocks = [bytearray(8192) for _ in range(20_000)]  # 160 MB, malloc's (not Python's pools)
    for block in blocks:
        block[::4096] = b"x" * len(block[::4096])  # touched: resident
    kept = blocks[::16]  # one block in 16 stays: free() alone cannot shrink the heap
    del blocks
    freed = anonymous_kb()

    assert trim_heap()

    assert anonymous_kb() < freed - 100_000
    assert all(block[0] == ord("x") for block in kept)
