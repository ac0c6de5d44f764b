"""``memoryd bench peers`` end to end, one side at a time, on a tiny LongMemEval-shaped file."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memoryd.services.bench.peers import DATASET_FILE

# Both sides load MiniLM; the memoryd side also spawns `memoryd up` and its nats-server.
pytestmark = [pytest.mark.integration, pytest.mark.model]

TINY = ["--n-write", "20", "--n-total", "40", "--n-search", "5", "--rest-seconds", "1"]
FIGURES = (
    "cold_start_s",
    "write_msgs_per_s",
    "fill_msgs_per_s",
    "search_p50_ms",
    "search_p95_ms",
    "search_p99_ms",
    "peak_rss_mb",
    "peak_rss_main_mb",
    "rest_rss_mb",
    "rest_pss_mb",
    "rest_main_mb",
)


def write_dataset(folder: Path) -> Path:
    """Write a LongMemEval-shaped file of 50 user turns in 5 questions; return its folder."""
    items = [
        {
            "question_id": f"q{q}",
            "question": f"What did I say about topic {q}?",
            "haystack_sessions": [
                [
                    {"role": "user", "content": f"I keep thinking about topic {q}, point {t}."},
                    {"role": "assistant", "content": "Noted."},
                ]
                for t in range(10)
            ],
        }
        for q in range(5)
    ]
    with gzip.open(folder / DATASET_FILE, "wt", encoding="utf-8") as out:
        json.dump(items, out)
    return folder


def run_bench(tmp_path: Path, side: str, *extra: str) -> dict[str, Any]:
    """Run ``memoryd bench peers --only <side>`` (tiny sizes); return the JSON it wrote."""
    out = tmp_path / "results" / "peers"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memoryd.services.cli",
            "bench",
            "peers",
            "--only",
            side,
            *TINY,
            *extra,
            "--data",
            str(write_dataset(tmp_path)),
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert 0 == done.returncode, done.stderr[-4_000:]
    assert "| figure |" in done.stdout  # the table is printed
    assert (tmp_path / "results" / "peers.md").is_file()
    report: dict[str, Any] = json.loads((tmp_path / "results" / "peers.json").read_text())
    return report


def assert_figures(report: dict[str, Any], side: str) -> None:
    """The side measured every figure, each positive; no ratios with one side."""
    figures = report["sides"][side]
    assert [side] == list(report["sides"])
    assert {} == report["ratios"]
    assert [] == [name for name in FIGURES if not figures.get(name, 0) > 0]
    assert 5 == figures["searches"]
    assert figures["rest_main_mb"] <= figures["rest_rss_mb"] <= figures["peak_rss_sampled_mb"]
    assert figures["search_results_mean"] > 0  # the searches found what was written
    assert f"--only {side}" in report["command"]


def test_bench_peers_measures_memoryd(tmp_path: Path) -> None:
    """`memoryd up` is started, written to, searched and stopped; the figures are in the file.
    With two users, each search finds what was written to its user's scope."""
    report = run_bench(tmp_path, "memoryd", "--users", "2")
    memoryd = report["sides"]["memoryd"]
    assert 2 == report["workload"]["users"]
    assert memoryd["keys_per_turn"] >= 1  # every turn is at least its own key
    assert memoryd["model_texts_per_s"] > 0
    assert memoryd["pipeline_vs_model"] > 0

    assert_figures(report, "memoryd")


@pytest.mark.skipif(
    importlib.util.find_spec("mem0") is None,
    reason="mem0ai is not installed (the optional `peers` extra)",
)
def test_bench_peers_measures_mem0(tmp_path: Path) -> None:
    """mem0 runs offline in its own process; the figures are in the file. Past the file's
    50 texts (the memo then embeds a repeated text once), over two users."""
    report = run_bench(tmp_path, "mem0", "--users", "2", "--n-total", "60")

    assert_figures(report, "mem0")
    assert report["workload"]["texts_repeat"]
    assert "a memo the bench gives" in (tmp_path / "results" / "peers.md").read_text()
    assert report["sides"]["mem0"]["init_s"] > 0
