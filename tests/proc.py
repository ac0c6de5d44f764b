"""What this process holds, read from Linux's /proc (for tests of memory given back)."""

from pathlib import Path


def anonymous_kb() -> int:
    """Return this process's resident anonymous memory in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")
