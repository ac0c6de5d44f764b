"""Tests for the pure parts of ``memoryd bench peers``: workload, figures, ratios, table."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from memoryd.services.bench.peer_mem0 import AddMemo, user_id
from memoryd.services.bench.peer_memoryd import (
    byte_compiled,
    key_texts,
    memoryd_sources,
    optimiser_peak_rss_mb,
    pipeline_share,
    process_role,
    user_scope,
)
from memoryd.services.bench.peers import (
    PeerOptions,
    TreeRss,
    Workload,
    asked_of,
    build_report,
    command_line,
    latency_figures,
    load_workload,
    parse_pss_kb,
    parse_vm_hwm_kb,
    parse_vm_rss_kb,
    percentile,
    queries,
    ratio,
    ratios,
    render_markdown,
    report_paths,
    table_rows,
    tree_below,
    tree_pss_kb,
    tree_status,
)
from memoryd.services.cli import _parser, _peer_options
from memoryd.services.indexer.items import KeyOptions


def _question(question_id: str, question: str, *sessions: list[tuple[str, str]]) -> Any:
    return {
        "question_id": question_id,
        "question": question,
        "haystack_sessions": [
            [{"role": role, "content": content} for role, content in session]
            for session in sessions
        ],
    }


def test_workload_is_the_user_turns_in_file_order(tmp_path: Path) -> None:
    """User turns of every session, in order; assistant turns and abstention questions dropped."""
    path = tmp_path / "data.json.gz"
    items = [
        _question("q1", "Where?", [("user", "a"), ("assistant", "x")], [("user", "b")]),
        _question("q2_abs", "Never?", [("user", "skipped")]),
        _question("q3", "When?", [("assistant", "y"), ("user", "c")]),
    ]
    with gzip.open(path, "wt", encoding="utf-8") as out:
        json.dump(items, out)

    workload = load_workload(path)

    assert ("a", "b", "c") == workload.texts
    assert ("Where?", "When?") == workload.questions


def test_queries_are_questions_then_turns_from_the_last_back() -> None:
    """As the reference scripts: questions first, then the turn texts reversed, cut to count."""
    workload = Workload(texts=("t1", "t2", "t3"), questions=("q1", "q2"))

    assert ["q1", "q2", "t3", "t2"] == queries(workload, 4)
    assert ["q1"] == queries(workload, 1)


def test_texts_repeat_past_their_end() -> None:
    """Message i is text i modulo the number of texts."""
    workload = Workload(texts=("t0", "t1"), questions=())

    assert ["t0", "t1", "t0"] == [workload.text(i) for i in range(3)]


def test_messages_and_searches_go_to_the_users_in_turn() -> None:
    """Message i goes to user i mod users, and so does search i; one user: all to user 0."""
    workload = Workload(texts=("t0", "t1", "t2"), questions=("q0", "q1"))
    three = PeerOptions(n_search=4, users=3)

    assert [0, 1, 2, 0, 1] == [three.user_of(i) for i in range(5)]
    assert [(0, "q0"), (1, "q1"), (2, "t2"), (0, "t1")] == asked_of(workload, three)
    assert {0} == {user for user, _ in asked_of(workload, PeerOptions(n_search=4))}


def test_each_user_is_a_scope_of_its_own_on_both_sides() -> None:
    """One user keeps the reference scripts' scope; several get one each, the rest equal."""
    assert "bench" == user_scope(0, 1).user_id == user_id(0, 1)
    scopes = [user_scope(user, 3) for user in range(3)]
    assert ["bench-0", "bench-1", "bench-2"] == [scope.user_id for scope in scopes]
    assert ["bench-0", "bench-1", "bench-2"] == [user_id(user, 3) for user in range(3)]
    assert {("bench", "peer", "s1")} == {(s.tenant, s.agent_id, s.session_id) for s in scopes}


def test_a_workload_repeats_only_past_its_texts() -> None:
    """Writing more messages than there are texts repeats them (the memo is then used)."""
    workload = Workload(texts=("t0", "t1"), questions=())

    assert not workload.repeats(2)
    assert workload.repeats(3)


class _CountingEmbedder:
    """mem0's embedder interface (``embed(text, memory_action)``), counting its model calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        self.calls.append((text, memory_action))
        return [float(len(text)), 0.5]


def test_the_add_memo_embeds_an_added_text_once_and_every_search() -> None:
    """A repeated add comes from the memo (the same vector); searches always reach the model."""
    embedder = _CountingEmbedder()
    AddMemo(embedder)

    first = embedder.embed("hello", "add")
    again = embedder.embed("hello", "add")
    embedder.embed("hello", "search")
    embedder.embed("hello", "search")

    assert [5.0, 0.5] == first == again
    assert [("hello", "add"), ("hello", "search"), ("hello", "search")] == embedder.calls


def test_percentile_takes_the_rounded_rank_of_the_sorted_values() -> None:
    """Index round(q/100 * (n-1)) of the sorted values, never outside them."""
    values = [50.0, 10.0, 40.0, 20.0, 30.0]

    assert 10.0 == percentile(values, 0)
    assert 30.0 == percentile(values, 50)
    assert 50.0 == percentile(values, 99)
    assert 50.0 == percentile(values, 100)
    assert 7.0 == percentile([7.0], 99)


def test_latency_figures_name_each_percentile_and_the_mean() -> None:
    """p50, p95, p99 and the mean, under the given prefix."""
    figures = latency_figures("search", [1.0, 2.0, 3.0, 4.0, 5.0])

    assert {
        "search_p50_ms": 3.0,
        "search_p95_ms": 5.0,
        "search_p99_ms": 5.0,
        "search_mean_ms": 3.0,
    } == figures


def test_ratio_is_memoryd_over_mem0_when_both_are_known() -> None:
    """A missing figure or a zero divisor gives no ratio instead of failing."""
    assert 2.5 == ratio(50.0, 20.0)
    assert ratio(None, 20.0) is None
    assert ratio(50.0, None) is None
    assert ratio(50.0, 0.0) is None


def test_ratios_cover_the_figures_both_sides_have() -> None:
    """Rates, latencies, RSS: divided; counts, load averages and one-sided figures: left out."""
    memoryd = {
        "write_msgs_per_s": 50.0,
        "search_p50_ms": 40.0,
        "search_p99_ms": 90.0,
        "peak_rss_mb": 600.0,
        "load_p50_ms": 80.0,
        "search_results_mean": 3.0,
        "load1_start": 2.0,
    }
    mem0 = {
        "write_msgs_per_s": 100.0,
        "search_p50_ms": 10.0,
        "search_p99_ms": 30.0,
        "peak_rss_mb": 800.0,
        "search_results_mean": 10.0,
        "load1_start": 2.0,
        "init_s": 9.0,
    }

    assert {
        "write_msgs_per_s": 0.5,
        "search_p50_ms": 4.0,
        "search_p99_ms": 3.0,
        "peak_rss_mb": 0.75,
    } == ratios(memoryd, mem0)


def test_table_has_a_column_per_side_and_the_ratio() -> None:
    """One row per figure some side measured; n/a where a side or the ratio is missing."""
    sides = {
        "memoryd": {"write_msgs_per_s": 50.0, "peak_rss_mb": 612.4, "load_p50_ms": 81.25},
        "mem0": {"write_msgs_per_s": 100.0, "peak_rss_mb": 800.0},
    }

    rows = table_rows(sides, ratios(sides["memoryd"], sides["mem0"]))

    assert "| figure | memoryd | mem0 | memoryd / mem0 |" == rows[0]
    assert "| write rate, first n-write, one message per call (msgs/s) | 50 | 100 | 0.50 |" in rows
    assert "| peak RSS, process tree (MB) | 612 | 800 | 0.77 |" in rows
    assert "| load: search p50 (ms) | 81.2 | n/a | n/a |" in rows
    assert 2 + 3 == len(rows)


def test_one_side_alone_has_no_ratios() -> None:
    """--only: the report holds that side's figures and an empty ratio table."""
    options = PeerOptions(only="memoryd", n_write=2, n_total=4, n_search=1)
    workload = Workload(texts=("ab", "abcd"), questions=("q",))

    report = build_report(options, workload, {"memoryd": {"write_msgs_per_s": 5.0}})

    assert {} == report["ratios"]
    assert {"memoryd": {"write_msgs_per_s": 5.0}} == report["sides"]
    assert 3.0 == report["workload"]["mean_chars"]
    assert "| write rate, first n-write, one message per call (msgs/s) | 5 | n/a |" in (
        render_markdown(report)
    )


def test_both_sides_give_ratios_in_the_report() -> None:
    """With both sides, the report divides memoryd's figures by mem0's."""
    options = PeerOptions()
    workload = Workload(texts=("ab",), questions=("q",))
    sides = {"memoryd": {"search_p50_ms": 30.0}, "mem0": {"search_p50_ms": 10.0}}

    report = build_report(options, workload, sides)

    assert {"search_p50_ms": 3.0} == report["ratios"]
    assert report["command"] in render_markdown(report)


def test_command_line_names_every_size() -> None:
    """The report's command reproduces the run."""
    options = PeerOptions(n_write=20, n_total=40, n_search=5, only="mem0", mem0_threads=2, users=3)

    assert (
        "memoryd bench peers --n-write 20 --n-total 40 --n-search 5 --concurrency 0 "
        "--only mem0 --mem0-threads 2 --users 3"
    ) == command_line(options)


def test_the_command_line_parses_back_into_the_same_options() -> None:
    """Every word of the report's command is an option `memoryd bench peers` takes."""
    options = PeerOptions(
        n_write=20,
        n_total=40,
        n_search=5,
        concurrency=8,
        load_seconds=12.5,
        users=3,
        rest_seconds=30,
    )
    words = command_line(options).split()[1:]

    args = _parser().parse_args(words)

    assert options == _peer_options(args)


def test_defaults_are_the_issue_sizes() -> None:
    """1,000 writes timed, 5,000 in the scope, 200 searches, no load phase, both sides."""
    assert (
        "memoryd bench peers --n-write 1000 --n-total 5000 --n-search 200 --concurrency 0"
    ) == command_line(PeerOptions())
    assert ("memoryd", "mem0") == PeerOptions().sides()


def test_total_below_the_first_writes_is_refused() -> None:
    """n-total counts the first n-write messages, so it cannot be smaller."""
    with pytest.raises(ValidationError, match="n_total must be at least n_write"):
        PeerOptions(n_write=100, n_total=50)


def test_out_is_the_stem_of_both_files() -> None:
    """--out bench/results/peers writes peers.json and peers.md."""
    json_path, markdown_path = report_paths(Path("bench/results/peers"))

    assert Path("bench/results/peers.json") == json_path
    assert Path("bench/results/peers.md") == markdown_path


def test_vm_hwm_is_read_from_a_status_text() -> None:
    """The peak resident set in kB; 0 when the line is absent (a kernel thread)."""
    status = "Name:\tpython\nVmPeak:\t  900 kB\nVmHWM:\t  51200 kB\nVmRSS:\t  40000 kB\n"

    assert 51_200 == parse_vm_hwm_kb(status)
    assert 0 == parse_vm_hwm_kb("Name:\tkthreadd\n")


def test_key_texts_are_the_indexers_distinct_keys_in_order() -> None:
    """A short turn gets a window with the next; first-person sentences are keys of their own;
    a composed window asks the model for nothing new."""
    texts = ["Hi there.", "I adopted a greyhound last month. It is shy.", "Hi there."]
    keys = key_texts(texts, KeyOptions())
    composed = key_texts(texts, KeyOptions(composed_windows=True))

    assert [
        "Hi there.",
        "I adopted a greyhound last month. It is shy.",
        "Hi there.\nI adopted a greyhound last month. It is shy.",
        "I adopted a greyhound last month.",
        "I adopted a greyhound last month. It is shy.\nHi there.",
    ] == keys
    assert [
        "Hi there.",
        "I adopted a greyhound last month. It is shy.",
        "I adopted a greyhound last month.",
    ] == composed


def test_key_texts_join_windows_within_each_users_conversation() -> None:
    """With two users in turn, a window joins a turn to the same user's previous turn."""
    texts = ["Hi there.", "Hello you.", "I adopted a greyhound.", "Fine thanks."]

    keys = key_texts(texts, KeyOptions(facts=False), users=2)

    assert "Hi there.\nI adopted a greyhound." in keys
    assert "Hello you.\nFine thanks." in keys
    assert not any(key.startswith("Hi there.\nHello you.") for key in keys)


def test_pipeline_share_is_embedded_texts_per_second_over_the_models_rate() -> None:
    """28 turns/s with 2.5 texts each against a model doing 70 texts/s is 1.0."""
    assert 1.0 == pipeline_share(28.0, 2.5, 70.0)
    assert 0.0 == pipeline_share(28.0, 2.5, 0.0)


def test_the_optimising_childs_peak_is_the_largest_its_log_lines_name() -> None:
    """The child has exited when the tree is read: its peak comes from `memoryd up`'s log."""
    lines = [
        '{"event": "edge_index.optimized", "where": "child_process", "child_peak_rss_mb": 310.5}',
        "not json at all",
        '{"event": "edge_index.optimized", "where": "in_process", "child_peak_rss_mb": null}',
        '{"event": "edge_index.optimized", "where": "child_process", "child_peak_rss_mb": 322.0}',
        '{"event": "recall_failed", "child_peak_rss_mb": 999}',
    ]
    assert 322.0 == optimiser_peak_rss_mb("\n".join(lines))
    assert 0.0 == optimiser_peak_rss_mb('{"event": "edge_index.loaded"}')


def test_vm_rss_is_read_from_a_status_text() -> None:
    """The resident set now in kB, not the peak; 0 when the line is absent."""
    status = "Name:\tpython\nVmHWM:\t  51200 kB\nVmRSS:\t  40000 kB\n"

    assert 40_000 == parse_vm_rss_kb(status)
    assert 0 == parse_vm_rss_kb("Name:\tkthreadd\n")


def test_pss_is_read_from_a_smaps_rollup_text() -> None:
    """The proportional set in kB, not Pss_Anon or the resident set; 0 when absent."""
    rollup = (
        "55d0c0de0000-7ffd00000000 ---p 00000000 00:00 0  [rollup]\n"
        "Rss:              468000 kB\nPss:              371000 kB\nPss_Anon:  219000 kB\n"
    )

    assert 371_000 == parse_pss_kb(rollup)
    assert 0 == parse_pss_kb("Rss: 10 kB\n")


def test_a_page_mapped_twice_counts_once_in_the_tree_pss_and_twice_in_its_rss(
    tmp_path: Path,
) -> None:
    """A child maps one 64 MB file twice and touches both: its resident set grows by ~128
    MB, its proportional set by ~64 (what a process that maps one compiled model twice
    holds); a process that is gone adds nothing."""
    data = tmp_path / "weights.bin"
    data.write_bytes(b"w" * (64 * 1024 * 1024))
    hold = (
        "import mmap, sys, time\n"
        "f = open(sys.argv[1], 'rb')\n"
        "maps = [mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) for _ in range(2)]\n"
        "total = sum(m[i] for m in maps for i in range(0, len(m), 4096))\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", hold, str(data)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and "ready" in child.stdout.readline()
        rss_kb, _ = tree_status(child.pid)[child.pid]
        pss_kb = tree_pss_kb([child.pid])
    finally:
        child.kill()
        child.wait(30)

    assert rss_kb - pss_kb > 50 * 1024
    assert 0 == tree_pss_kb([child.pid])


def tree_rss_mb(root: int) -> float:
    """Return the resident set of ``root``'s tree now, summed, in MB."""
    return sum(rss for rss, _ in tree_status(root).values()) / 1024


def test_the_sampled_tree_counts_a_child_while_it_lives() -> None:
    """A child holding ~200 MB while sampled adds to the tree's sampled peak; the tree is
    found through the threads' children lists; once the child is gone it is not counted."""
    hold = "import time; b = b'x' * (200 * 1024 * 1024); time.sleep(1.5)"
    before = tree_rss_mb(os.getpid())
    with TreeRss(os.getpid(), interval=0.05) as sampled:
        child = subprocess.Popen([sys.executable, "-c", hold])
        try:
            time.sleep(1.0)
            assert child.pid in tree_below(os.getpid())
        finally:
            child.wait(30)
    after = tree_rss_mb(os.getpid())

    assert sampled.peak_mb >= before + 150
    assert after < before + 150


def test_at_rest_the_tree_is_read_as_it_is_now() -> None:
    """What the tree holds when read at rest: a child holding ~200 MB counts while it lives,
    in the resident and the proportional sets, not in the root's."""
    hold = "import sys, time; b = b'x' * (200 * 1024 * 1024); print(1, flush=True); time.sleep(30)"
    sampled = TreeRss(os.getpid())
    alone = sampled.at_rest()
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # the child holds its 200 MB
        held = sampled.at_rest()
    finally:
        child.kill()
        child.wait(30)

    assert held["rest_rss_mb"] >= alone["rest_rss_mb"] + 150
    assert held["rest_pss_mb"] >= alone["rest_pss_mb"] + 150
    assert held["rest_main_mb"] < alone["rest_main_mb"] + 50


def test_the_summed_peaks_count_a_child_that_exited_before_the_end() -> None:
    """A child that held ~200 MB and exited while sampled (an index build stopped with the
    service) stays in the summed peaks, which are then at least the largest sample; the root's
    own peak is read too."""
    hold = "import time; b = b'x' * (200 * 1024 * 1024); time.sleep(0.6)"
    with TreeRss(os.getpid(), interval=0.05) as sampled:
        subprocess.run([sys.executable, "-c", hold], check=True, timeout=30)
        time.sleep(0.2)  # samples after the child exited
    figures = sampled.figures()

    assert figures["peak_rss_mb"] >= figures["peak_rss_main_mb"] + 150
    assert figures["peak_rss_mb"] >= figures["peak_rss_sampled_mb"]
    assert figures["peak_rss_main_mb"] > 0
    assert 0 < figures["peak_pss_sampled_mb"] <= figures["peak_rss_sampled_mb"]


def test_each_named_process_has_its_peak_and_its_share_of_the_trees_peak() -> None:
    """A child named by its command line gets its own peak and what it held at the tree's
    sampled peak; a process the namer leaves unnamed is counted in the tree only."""
    hold = "import time; b = b'x' * (200 * 1024 * 1024); time.sleep(1.0)  # holder"

    def role(command: str) -> str | None:
        return "holder" if "# holder" in command else None

    with TreeRss(os.getpid(), interval=0.05, role=role) as sampled:
        subprocess.run([sys.executable, "-c", hold], check=True, timeout=30)
    figures = sampled.figures()

    assert figures["peak_rss_holder_mb"] >= 190
    assert 190 <= figures["at_peak_holder_mb"] <= figures["peak_rss_holder_mb"]
    assert not [key for key in figures if key.startswith("at_peak_") and "holder" not in key]


def test_memoryd_up_s_processes_are_named_by_their_command_lines() -> None:
    """The bench names memoryd up, its index host, an optimising child and nats-server."""
    python = sys.executable
    assert "main" == process_role(f"{python} -m memoryd.services.cli up ")
    assert "host" == process_role(f"{python} -m memoryd.shared.adapters.index.edge_host 7 ")
    build = f"{python} -m memoryd.shared.adapters.index.edge_build /tmp/x/gen-2 384 "
    assert "build" == process_role(build)
    assert "nats" == process_role("/venv/bin/nats-server -js -sd /tmp/x ")
    assert process_role(f"{python} -c pass ") is None


def test_the_run_byte_compiles_memoryds_sources_and_leaves_the_tree_as_it_found_it(
    tmp_path: Path,
) -> None:
    """An install is byte-compiled (pip does it); an editable one under PYTHONDONTWRITEBYTECODE
    is not, and would compile memoryd's modules at every start the bench times."""
    package = tmp_path / "package"
    (package / "inner").mkdir(parents=True)
    for name in ("a.py", "inner/b.py", "kept.py"):
        (package / name).write_text("VALUE = 1\n")
    cache = package / "__pycache__"
    cache.mkdir()
    kept = cache / "kept.cpython-311.pyc"
    kept.write_bytes(b"compiled before")

    with byte_compiled([package]):
        during = sorted(path.relative_to(package).parts[0] for path in package.rglob("*.pyc"))

    assert ["__pycache__", "__pycache__", "inner"] == during
    assert [kept] == list(package.rglob("*.pyc"))
    assert not (package / "inner" / "__pycache__").exists()
    assert {"shared", "services"} == {folder.name for folder in memoryd_sources()}


def test_a_child_is_named_by_what_it_became_not_by_its_parent_before_its_exec() -> None:
    """A child seen between its fork and its exec has its parent's command line: it takes the
    name of the program it became (nats-server was once counted as the service itself)."""
    # The child sleeps 0.5 s after the fork, then becomes `sleep`; the root stays python.
    forks = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(0.5)\n"
        "    os.execv('/bin/sleep', ['sleep', '1'])\n"
        "os.wait()"
    )

    def role(command: str) -> str | None:
        return "sleeper" if command.startswith("sleep ") else "parent"

    with TreeRss(os.getpid(), interval=0.05, role=role) as sampled:
        subprocess.run([sys.executable, "-c", forks], check=True, timeout=30)
    figures = sampled.figures()

    assert figures["peak_rss_sleeper_mb"] > 0
    assert figures["peak_rss_parent_mb"] > figures["peak_rss_sleeper_mb"]
