"""``memoryd bench peers``: memoryd next to mem0, its simplest peer, on the same texts.

The workload is the reference scripts' (``../shared/peers``): the LongMemEval-S dev user turns,
written one message per call into one scope, then searches with limit 10 (the questions, then
the turn texts reversed). Each side runs in its own child process (``peer_memoryd``,
``peer_mem0``), one after the other, and prints its figures as JSON on stdout; this module
runs them, divides memoryd's figures by mem0's and writes ``<out>.json`` and ``<out>.md``.

The figures and the table are small pure functions; the phases every side goes through
(``measure_phases``) are shared, so both sides are timed by the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import importlib.util
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from memoryd.shared.logging import configure_logging
from memoryd.shared.settings import StartupError

__all__ = [
    "DATASET_FILE",
    "FIGURES",
    "SIDES",
    "Figures",
    "Peer",
    "PeerOptions",
    "TreeRss",
    "Workload",
    "asked_of",
    "command_line",
    "latency_figures",
    "load_workload",
    "measure_phases",
    "parse_pss_kb",
    "parse_vm_hwm_kb",
    "parse_vm_rss_kb",
    "percentile",
    "queries",
    "ratio",
    "ratios",
    "render_markdown",
    "run_peers_bench",
    "side_main",
    "tree_below",
    "tree_pss_kb",
    "tree_status",
]

Side = Literal["memoryd", "mem0"]
SIDES: tuple[Side, ...] = ("memoryd", "mem0")
SIDE_MODULES: Mapping[Side, str] = {
    "memoryd": "memoryd.services.bench.peer_memoryd",
    "mem0": "memoryd.services.bench.peer_mem0",
}
DATASET_FILE = "longmemeval_s_dev.json.gz"
LIMIT = 10  # results per search, as in the reference scripts
FILL_CHUNK = 1_000  # messages written between two waits while filling to n-total
WARM_QUERIES = 5  # searches before the timed ones, untimed
Figures = dict[str, float]

# The table's rows, in order, and whether memoryd / mem0 is shown for the row.
FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("cold_start_s", "cold start: process spawned to first search answered (s)", True),
    ("write_msgs_per_s", "write rate, first n-write, one message per call (msgs/s)", True),
    ("fill_msgs_per_s", "fill rate, n-write to n-total (msgs/s)", True),
    ("search_p50_ms", "search at n-total, 1 caller, p50 (ms)", True),
    ("search_p95_ms", "search at n-total, 1 caller, p95 (ms)", True),
    ("search_p99_ms", "search at n-total, 1 caller, p99 (ms)", True),
    ("search_mean_ms", "search at n-total, 1 caller, mean (ms)", True),
    ("search_results_mean", "results per search (mean)", False),
    ("load_callers", "load: concurrent callers", False),
    ("load_p50_ms", "load: search p50 (ms)", True),
    ("load_p95_ms", "load: search p95 (ms)", True),
    ("load_p99_ms", "load: search p99 (ms)", True),
    ("load_requests_per_s", "load: searches/s", True),
    ("load_seconds", "load: seconds the callers kept asking", False),
    ("load_failed", "load: searches failed (timed out, refused)", False),
    ("keys_per_turn", "texts embedded per turn (index keys)", False),
    ("model_texts_per_s", "the model alone on those texts, memoryd stopped (texts/s)", False),
    ("pipeline_vs_model", "write rate x texts per turn / the model's own rate", False),
    ("peak_rss_mb", "peak RSS, process tree (MB)", True),
    ("peak_rss_sampled_mb", "peak RSS, process tree, summed at each sample (MB)", True),
    ("peak_rss_main_mb", "peak RSS, the main process alone (MB)", False),
    ("peak_pss_sampled_mb", "peak PSS, process tree, summed about every 1 s (MB)", True),
    ("peak_rss_optimiser_mb", "peak RSS, the index's optimising child, counted above (MB)", False),
    ("peak_rss_host_mb", "peak RSS, the index host (MB)", False),
    ("peak_rss_nats_mb", "peak RSS, nats-server (MB)", False),
    ("at_peak_main_mb", "at the tree's sampled peak: the main process (MB)", False),
    ("at_peak_host_mb", "at the tree's sampled peak: the index host (MB)", False),
    ("at_peak_build_mb", "at the tree's sampled peak: the optimising child (MB)", False),
    ("at_peak_nats_mb", "at the tree's sampled peak: nats-server (MB)", False),
    ("rest_rss_mb", "at rest, rest-seconds after the last search: RSS, process tree (MB)", True),
    ("rest_pss_mb", "at rest: PSS, process tree (MB)", True),
    ("rest_main_mb", "at rest: the main process (MB)", False),
    ("load1_start", "machine load average (1 min) at the side's start", False),
    ("load1_end", "machine load average (1 min) at the side's end", False),
)
_MISSING = "n/a"


class PeerOptions(BaseModel):
    """What ``memoryd bench peers`` measures, and where it reads and writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data: Path = Path("../shared/bench")
    out: Path = Path("bench/results/peers")
    n_write: int = Field(default=1_000, ge=1)
    n_total: int = Field(default=5_000, ge=1)
    n_search: int = Field(default=200, ge=1)
    concurrency: int = Field(default=0, ge=0)
    # How long the load phase keeps its callers asking (each takes the next query in turn).
    load_seconds: float = Field(default=60.0, gt=0)
    only: Side | None = None
    mem0_threads: int = Field(default=1, ge=1)
    # Users the messages are spread over, in turn (message i to user i mod users); a search
    # asks the next user's scope in turn. One: every message in one scope.
    users: int = Field(default=1, ge=1)
    # After the last phase, each side idles this long, then its tree's resident and
    # proportional sets are read (0: not read): what a quiet service holds.
    rest_seconds: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _total_holds_the_first_writes(self) -> PeerOptions:
        if self.n_total < self.n_write:
            raise ValueError("n_total must be at least n_write")
        return self

    def sides(self) -> tuple[Side, ...]:
        """Return the sides to run, in the order they run."""
        return (self.only,) if self.only else SIDES

    def dataset(self) -> Path:
        """Return the LongMemEval-S dev file."""
        return self.data / DATASET_FILE

    def user_of(self, index: int) -> int:
        """Return the user the ``index``-th message goes to (or search asks), in turn."""
        return index % self.users


class Workload(BaseModel):
    """The texts both sides write and the questions they are asked, in file order."""

    model_config = ConfigDict(frozen=True)

    texts: tuple[str, ...]
    questions: tuple[str, ...]

    def text(self, index: int) -> str:
        """Return the ``index``-th message written (the texts repeat past their end)."""
        return self.texts[index % len(self.texts)]

    def repeats(self, n_total: int) -> bool:
        """Say whether writing ``n_total`` messages repeats texts."""
        return n_total > len(self.texts)


def load_workload(path: Path) -> Workload:
    """Read the user turns and questions of LongMemEval-S; abstention questions left out."""
    if not path.is_file():
        raise StartupError(
            f"the LongMemEval-S dev data is not at {path} (resolved from {Path.cwd()}): run "
            "from the repository beside ../shared, or pass --data FOLDER"
        )
    with gzip.open(path, "rt", encoding="utf-8") as source:
        items = [q for q in json.load(source) if not q["question_id"].endswith("_abs")]
    texts = [
        turn["content"]
        for item in items
        for session in item["haystack_sessions"]
        for turn in session
        if turn["role"] == "user"
    ]
    return Workload(texts=tuple(texts), questions=tuple(q["question"] for q in items))


def queries(workload: Workload, count: int) -> list[str]:
    """Return the searches: the questions, then the turn texts from the last one back."""
    return [*workload.questions, *reversed(workload.texts)][:count]


def percentile(values: Sequence[float], q: float) -> float:
    """Return the sorted value at index round(q/100 * (n-1)), the reference scripts' rule."""
    ordered = sorted(values)
    index = round(q / 100 * (len(ordered) - 1))
    return ordered[min(len(ordered) - 1, max(0, index))]


def latency_figures(prefix: str, millis: Sequence[float]) -> Figures:
    """Return p50, p95, p99 and the mean of latencies in milliseconds, named by ``prefix``."""
    return {
        f"{prefix}_p50_ms": percentile(millis, 50),
        f"{prefix}_p95_ms": percentile(millis, 95),
        f"{prefix}_p99_ms": percentile(millis, 99),
        f"{prefix}_mean_ms": statistics.fmean(millis),
    }


def ratio(memoryd: float | None, mem0: float | None) -> float | None:
    """Return memoryd / mem0, or None when either is missing or mem0's is zero."""
    if memoryd is None or mem0 is None or mem0 == 0:
        return None
    return memoryd / mem0


def ratios(memoryd: Mapping[str, float], mem0: Mapping[str, float]) -> dict[str, float]:
    """Return memoryd / mem0 for every figure of the table that both sides measured."""
    found = {
        key: ratio(memoryd.get(key), mem0.get(key)) for key, _label, divides in FIGURES if divides
    }
    return {key: value for key, value in found.items() if value is not None}


def _cell(value: float | None) -> str:
    if value is None:
        return _MISSING
    if value == int(value) or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _ratio_cell(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.2f}"


def table_rows(sides: Mapping[str, Mapping[str, float]], shown: Mapping[str, float]) -> list[str]:
    """Return the markdown table: one row per figure some side has, a column per side."""
    names = list(sides)
    header = ["figure", *names, "memoryd / mem0"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, label, _divides in FIGURES:
        if not any(key in figures for figures in sides.values()):
            continue
        cells = [label, *(_cell(sides[n].get(key)) for n in names), _ratio_cell(shown.get(key))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_markdown(report: Mapping[str, Any]) -> str:
    """Render the report: the command, the machine, the workload, then the table."""
    workload = report["workload"]
    lines = [
        "# memoryd bench peers",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Measured {report['measured_at']} on {report['machine']}; the sides ran one after "
        f"the other ({', '.join(report['sides'])}). Workload: {workload['turns']:,} "
        f"LongMemEval-S dev user turns ({workload['mean_chars']:.0f} characters on average), "
        f"one message per call {_spread(workload)}; searches with limit 10.",
        "",
        *table_rows(report["sides"], report["ratios"]),
        "",
        "memoryd / mem0: for rates, above 1 means memoryd is faster; for times and memory, "
        "below 1 means memoryd takes less. A write counts once searchable: for memoryd, applied "
        "by every projection; for mem0, when `add` returns. Results per search: memoryd's "
        "hybrid items (asked with 10 per session: every turn here is in one session; its "
        "answer also holds the 7 most recent turns as pages), mem0's results. "
        "Peak RSS is each process's VmHWM summed over every process seen in the side's tree, "
        "sampled every 0.1 s (memoryd: `memoryd up`, its nats-server and the index's "
        "optimising child, had it run, even one stopped with the service; mem0: the process "
        "that runs it): an upper bound, since those peaks need not coincide. "
        "Summed at each sample: the tree's resident sets read together every 0.1 s, the "
        "largest sum (what the tree held at once). PSS: the tree's proportional sets read "
        "together about every second, the largest sum; a page mapped N times counts 1/N at "
        "each mapping (a resident set counts it at every one). memoryd's sources are "
        "byte-compiled "
        "before its side starts, as pip compiles an installed package (mem0's are).",
        "",
    ]
    return "\n".join(lines)


def _spread(workload: Mapping[str, Any]) -> str:
    """Say where the messages went, and how a repeated text is embedded."""
    users = workload["users"]
    where = "into one scope" if users == 1 else f"to {users:,} users in turn (one scope each)"
    if not workload["texts_repeat"]:
        return where
    return (
        f"{where}, the texts repeating past their end; each side embeds a text it has added "
        "before once (memoryd from its embedding cache, mem0 from a memo the bench gives its "
        "`add`: without it mem0 would embed every repeat)"
    )


def command_line(options: PeerOptions) -> str:
    """Return the command that reproduces a run with these options."""
    words = [
        "memoryd bench peers",
        f"--n-write {options.n_write}",
        f"--n-total {options.n_total}",
        f"--n-search {options.n_search}",
        f"--concurrency {options.concurrency}",
    ]
    if options.concurrency:
        words.append(f"--load-seconds {options.load_seconds:g}")
    if options.only:
        words.append(f"--only {options.only}")
    if options.mem0_threads != 1:
        words.append(f"--mem0-threads {options.mem0_threads}")
    if options.users != 1:
        words.append(f"--users {options.users}")
    if options.rest_seconds:
        words.append(f"--rest-seconds {options.rest_seconds:g}")
    return " ".join(words)


# -- memory of a process tree, from /proc ------------------------------------------------------


def parse_vm_hwm_kb(status: str) -> int:
    """Return VmHWM (peak resident set, kB) from a /proc/<pid>/status text; 0 if absent."""
    return _status_kb(status, "VmHWM:")


def parse_vm_rss_kb(status: str) -> int:
    """Return VmRSS (resident set now, kB) from a /proc/<pid>/status text; 0 if absent."""
    return _status_kb(status, "VmRSS:")


def parse_pss_kb(rollup: str) -> int:
    """Return Pss (kB) from a /proc/<pid>/smaps_rollup text; 0 if absent."""
    return _status_kb(rollup, "Pss:")


def tree_pss_kb(pids: Iterable[int]) -> int:
    """Return the proportional set sizes of ``pids`` summed, in kB (those still alive)."""
    total = 0
    for pid in pids:
        try:
            total += parse_pss_kb(Path(f"/proc/{pid}/smaps_rollup").read_text())
        except OSError:
            continue  # the process ended while we looked (or /proc has no rollup)
    return total


def _status_kb(status: str, field: str) -> int:
    for line in status.splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def tree_below(root: int) -> list[int]:
    """Return ``root`` and every live process below it, from each thread's children list.

    Cheaper than reading every process's parent: a sampler calls it often.
    """
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                todo.extend(int(child) for child in children.read_text().split())
            except OSError:
                continue  # the thread or the process ended while we looked
    return found


def tree_status(root: int) -> dict[int, tuple[int, int]]:
    """Return each live process of ``root``'s tree: pid -> (VmRSS, VmHWM) in kB."""
    found = {}
    for pid in tree_below(root):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue  # the process ended while we looked
        found[pid] = (parse_vm_rss_kb(status), parse_vm_hwm_kb(status))
    return found


class TreeRss:
    """Sample a process tree every ``interval`` in a thread, from start to stop.

    ``peak_mb``: the largest resident set the tree held at once (summed at each sample: a
    spike shorter than ``interval`` can be missed). ``summed_peaks_mb``: each process's own
    peak (VmHWM, its last reading) summed over every process seen in the tree, those that
    exited before the end included (memoryd's optimising child, a build stopped with the
    service): an upper bound, since those peaks need not coincide. A process that lived less
    than ``interval`` may go unseen. ``main_peak_mb``: the root's own peak.

    ``pss_peak_mb``: the largest proportional set the tree held at once, read every
    ``pss_every`` samples (a kernel walk of each process's pages: 10.7 ms for a 470 MB
    `memoryd up` here, against ~0.05 ms for its status). A page mapped N times counts 1/N
    at each mapping, where a resident set counts it whole at every one: memoryd's processes
    share libraries, and its workers' and recall's models map one compiled blob each (the
    same 88 MB file: Rss 468 against Pss 371 MB for that process).
    """

    def __init__(
        self,
        root: int,
        interval: float = 0.1,
        pss_every: int = 10,
        role: Callable[[str], str | None] | None = None,
    ) -> None:
        """Sample the tree of ``root`` every ``interval`` seconds once started (its
        proportional set every ``pss_every`` samples).

        ``role`` names a process of the tree from its command line (None: not named); each
        named role's peak, and what it held at the tree's sampled peak, join the figures.
        """
        self._root, self._interval, self._pss_every = root, interval, pss_every
        self._role = role
        self._roles: dict[int, str | None] = {}
        self._at_peak_kb: dict[int, int] = {}
        self._samples = 0
        self.pss_peak_mb = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="tree-rss", daemon=True)
        self._peaks_kb: dict[int, int] = {}
        self.peak_mb = 0.0

    def __enter__(self) -> TreeRss:
        """Start sampling."""
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Take a last sample and stop."""
        self._stopped.set()
        self._thread.join()

    @property
    def summed_peaks_mb(self) -> float:
        """Return every process's peak seen, summed, in MB."""
        return sum(self._peaks_kb.values()) / 1024

    @property
    def main_peak_mb(self) -> float:
        """Return the root process's peak, in MB."""
        return self._peaks_kb.get(self._root, 0) / 1024

    def figures(self) -> Figures:
        """Return the tree's figures: summed peaks, the largest sample, the root's peak, and
        for each named role its peak (``peak_rss_<role>_mb``: the largest of its processes)
        and its resident set at the tree's sampled peak (``at_peak_<role>_mb``: summed)."""
        figures: Figures = {
            "peak_rss_mb": self.summed_peaks_mb,
            "peak_rss_sampled_mb": self.peak_mb,
            "peak_rss_main_mb": self.main_peak_mb,
            "peak_pss_sampled_mb": self.pss_peak_mb,
        }
        for pid, role in self._roles.items():
            if role is None:
                continue
            peak, at_peak = f"peak_rss_{role}_mb", f"at_peak_{role}_mb"
            figures[peak] = max(figures.get(peak, 0.0), self._peaks_kb.get(pid, 0) / 1024)
            figures[at_peak] = figures.get(at_peak, 0.0) + self._at_peak_kb.get(pid, 0) / 1024
        return figures

    def at_rest(self) -> Figures:
        """Return what the tree holds now: its resident and proportional sets, and the
        root's resident set (``rest_rss_mb``, ``rest_pss_mb``, ``rest_main_mb``)."""
        status = tree_status(self._root)
        return {
            "rest_rss_mb": sum(rss for rss, _ in status.values()) / 1024,
            "rest_pss_mb": tree_pss_kb(status) / 1024,
            "rest_main_mb": status.get(self._root, (0, 0))[0] / 1024,
        }

    def _name(self, pid: int) -> None:
        """Name a process from its command line, at every sample it is seen in.

        Not once: a child seen between its fork and its exec still has its parent's command
        line (nats-server was once counted as `memoryd up` itself that way). A process that
        exited (a zombie's command line is empty) keeps the name it had when last seen.
        """
        if self._role is None:
            return
        command = b""
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        if command or pid not in self._roles:
            self._roles[pid] = self._role(command.replace(b"\0", b" ").decode())

    def _take(self, last: bool = False) -> None:
        status = tree_status(self._root)
        for pid, (_, hwm) in status.items():
            self._peaks_kb[pid] = max(self._peaks_kb.get(pid, 0), hwm)
            self._name(pid)
        held = sum(rss for rss, _ in status.values()) / 1024
        if held > self.peak_mb:
            self.peak_mb = held
            self._at_peak_kb = {pid: rss for pid, (rss, _) in status.items()}
        if last or self._samples % self._pss_every == 0:
            self.pss_peak_mb = max(self.pss_peak_mb, tree_pss_kb(status) / 1024)
        self._samples += 1

    def _sample(self) -> None:
        while True:
            self._take()
            if self._stopped.wait(self._interval):
                self._take(last=True)
                return


# -- the phases every side goes through --------------------------------------------------------


class Peer(Protocol):
    """One memory system, driven the same way on each side."""

    name: str

    async def write(self, user: int, index: int, text: str) -> None:
        """Store one message in ``user``'s scope."""

    async def settle(self) -> None:
        """Return once every message written so far is searchable."""

    async def search(self, user: int, query: str) -> int:
        """Search ``user``'s scope with limit 10; return the number of results."""

    async def load_search(self, user: int, query: str) -> int:
        """Search as one of several concurrent callers."""


def progress(side: str, message: str) -> None:
    """Say how far a side is, on stderr (stdout carries only the figures)."""
    print(f"bench peers [{side}] {message}", file=sys.stderr, flush=True)


async def _write(
    peer: Peer, workload: Workload, options: PeerOptions, start: int, stop: int
) -> float:
    started = time.perf_counter()
    for index in range(start, stop):
        await peer.write(options.user_of(index), index, workload.text(index))
    await peer.settle()
    return time.perf_counter() - started


async def _write_phases(peer: Peer, workload: Workload, options: PeerOptions) -> Figures:
    seconds = await _write(peer, workload, options, 0, options.n_write)
    figures = {"write_seconds": seconds, "write_msgs_per_s": options.n_write / seconds}
    fill = 0.0
    for start in range(options.n_write, options.n_total, FILL_CHUNK):
        stop = min(start + FILL_CHUNK, options.n_total)
        fill += await _write(peer, workload, options, start, stop)
        progress(peer.name, f"filled {stop} ({fill:.0f} s)")
    if options.n_total > options.n_write:
        figures |= {
            "fill_seconds": fill,
            "fill_msgs_per_s": (options.n_total - options.n_write) / fill,
        }
    return figures


Asked = Sequence[tuple[int, str]]  # (user, query)


def asked_of(workload: Workload, options: PeerOptions) -> list[tuple[int, str]]:
    """Return the searches and the user each asks: the users in turn."""
    return [(options.user_of(n), q) for n, q in enumerate(queries(workload, options.n_search))]


async def _search_phase(peer: Peer, asked: Asked) -> Figures:
    for user, query in asked[:WARM_QUERIES]:
        await peer.search(user, query)
    millis, found = [], []
    for user, query in asked:
        started = time.perf_counter()
        found.append(await peer.search(user, query))
        millis.append(1000 * (time.perf_counter() - started))
    figures = latency_figures("search", millis)
    return {"searches": len(asked), "search_results_mean": statistics.fmean(found), **figures}


async def _load_phase(peer: Peer, asked: Asked, callers: int, seconds: float) -> Figures:
    """Keep ``callers`` asking for ``seconds``; a search that fails (a timeout, a refusal)
    is counted, not retried. Searches/s counts the answered ones."""
    millis: list[float] = []
    failed: Counter[str] = Counter()
    pending = itertools.cycle(asked)  # callers take the next query in turn
    deadline = time.perf_counter() + seconds

    async def caller() -> None:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                await peer.load_search(*next(pending))
            except Exception as error:
                failed[type(error).__name__] += 1
                continue
            millis.append(1000 * (time.perf_counter() - started))

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    wall = time.perf_counter() - started
    if failed:
        progress(peer.name, f"load: failed searches by error: {dict(failed)}")
    return {
        "load_callers": callers,
        **latency_figures("load", millis),
        "load_requests_per_s": len(millis) / wall,
        "load_seconds": wall,
        "load_failed": sum(failed.values()),
    }


async def measure_phases(
    peer: Peer, workload: Workload, options: PeerOptions, sampled: TreeRss
) -> Figures:
    """Write n-write, fill to n-total, search one at a time, then under load if asked; then,
    if asked, idle ``rest_seconds`` and read what the side's tree holds (``sampled``)."""
    figures = await _write_phases(peer, workload, options)
    asked = asked_of(workload, options)
    figures |= await _search_phase(peer, asked)
    if options.concurrency:
        figures |= await _load_phase(peer, asked, options.concurrency, options.load_seconds)
    if options.rest_seconds:
        progress(peer.name, f"at rest for {options.rest_seconds:g} s")
        await asyncio.sleep(options.rest_seconds)
        figures |= sampled.at_rest()
    return figures


# -- one side per child process ----------------------------------------------------------------

Measure = Callable[[PeerOptions, float], Coroutine[Any, Any, Figures]]


def side_main(measure: Measure, argv: Sequence[str]) -> None:
    """Run one side in this process: ``argv`` is [options JSON, spawned-at monotonic time].

    Whatever the libraries print goes to stderr; stdout carries only the figures, as JSON.
    """
    figures_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    configure_logging("console", "WARNING")
    options = PeerOptions.model_validate_json(argv[0])
    started = {"load1_start": os.getloadavg()[0]}
    figures = asyncio.run(measure(options, float(argv[1])))
    figures_out.write(json.dumps(started | figures | {"load1_end": os.getloadavg()[0]}) + "\n")
    figures_out.flush()


def run_side(side: Side, options: PeerOptions) -> Figures:
    """Run one side in a child process and return its figures."""
    spawned_at = time.monotonic()  # CLOCK_MONOTONIC: the child reads the same clock
    done = subprocess.run(
        [sys.executable, "-m", SIDE_MODULES[side], options.model_dump_json(), repr(spawned_at)],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {side} side exited with status {done.returncode} (see above)")
    figures: Figures = json.loads(done.stdout.splitlines()[-1])
    return figures


def build_report(
    options: PeerOptions, workload: Workload, sides: Mapping[str, Figures]
) -> dict[str, Any]:
    """Return the report: command, machine, time, workload, each side's figures, the ratios."""
    both = "memoryd" in sides and "mem0" in sides
    return {
        "benchmark": "peers",
        "command": command_line(options),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.python_version()}, {os.cpu_count()} cpus",
        "workload": {
            "dataset": DATASET_FILE,
            "turns": len(workload.texts),
            "questions": len(workload.questions),
            "mean_chars": statistics.fmean(len(text) for text in workload.texts),
            "n_write": options.n_write,
            "n_total": options.n_total,
            "n_search": options.n_search,
            "limit": LIMIT,
            "concurrency": options.concurrency,
            "mem0_threads": options.mem0_threads,
            "users": options.users,
            "texts_repeat": workload.repeats(options.n_total),
        },
        "sides": {side: dict(figures) for side, figures in sides.items()},
        "ratios": ratios(sides["memoryd"], sides["mem0"]) if both else {},
    }


def report_paths(out: Path) -> tuple[Path, Path]:
    """Return the JSON and markdown files ``out`` names (``out`` is their common stem)."""
    return out.with_name(out.name + ".json"), out.with_name(out.name + ".md")


def write_report(report: Mapping[str, Any], out: Path) -> None:
    """Write the report as JSON and as a markdown table beside it."""
    json_path, markdown_path = report_paths(out)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    markdown_path.write_text(render_markdown(report))


def run_peers_bench(options: PeerOptions) -> dict[str, Any]:
    """Run each side in turn, write ``<out>.json`` and ``<out>.md``, print the table."""
    workload = load_workload(options.dataset())  # before any side: a wrong path fails now
    if "mem0" in options.sides() and importlib.util.find_spec("mem0") is None:
        raise StartupError(
            "the mem0 side needs mem0ai: pip install -e '.[peers]' (or run --only memoryd)"
        )
    sides: dict[str, Figures] = {side: run_side(side, options) for side in options.sides()}
    report = build_report(options, workload, sides)
    write_report(report, options.out)
    print(render_markdown(report), flush=True)
    return report
