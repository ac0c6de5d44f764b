"""Progress bars only for a terminal; the summaries export, import and the benches end with."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from memoryd.services import lifecycle
from memoryd.services.bench.metrics import Evaluation, GroupSummary
from memoryd.services.bench.report import BenchReport, figures_table, summary_table
from memoryd.services.runtime.progress import quiet, terminal_progress, watching_consumers


def shown(table: Table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_no_terminal_no_bars() -> None:
    """Told progress with nobody watching (a pipe, a log), nothing is written."""
    out = io.StringIO()
    with terminal_progress(Console(file=out, force_terminal=False)) as progress:
        progress("publishing", 5, 10)

    assert quiet is progress
    assert "" == out.getvalue()


def test_a_terminal_sees_a_bar_per_task() -> None:
    """At a terminal each task told gets its bar, named as told."""
    out = io.StringIO()
    with terminal_progress(Console(file=out, force_terminal=True, width=100)) as progress:
        progress("publishing", 5, 10)
        progress("memories of each user", 1, 4)

    assert "publishing" in out.getvalue() and "memories of each user" in out.getvalue()


def test_an_export_summary_counts_events_by_type_and_current_memories() -> None:
    """Each event type and the memories kept now are counted, and the total is the title."""
    lines = [
        json.dumps({"record": "event", "event": {"type": "turn.recorded.v1"}}),
        json.dumps({"record": "event", "event": {"type": "turn.recorded.v1"}}),
        json.dumps({"record": "memory", "memory": {"content": "x"}}),
    ]

    counts = lifecycle.export_summary(lines)
    text = shown(lifecycle.export_table(counts, "alice.jsonl"))

    assert {"turn.recorded.v1": 2, "memory (current)": 1} == dict(counts)
    assert "exported 3 records" in text and "to alice.jsonl" in text


def test_an_import_summary_has_a_row_per_event_type() -> None:
    """Published and already-held events per type; what was passed over in the caption."""
    report = lifecycle.ImportReport(
        published=3,
        present=1,
        passed_over=7,
        by_type={"memory.remembered.v1": (1, 1), "turn.recorded.v1": (2, 0)},
    )

    text = shown(lifecycle.import_table(report))

    assert "imported 3 events" in text
    assert "turn.recorded.v1" in text and "memory.remembered.v1" in text
    assert "7 records derived or read models: not published" in text


async def test_nobody_watching_asks_nothing_of_nats() -> None:
    """With the quiet progress the watcher never starts (no NATS at all here)."""
    nowhere: Any = None
    async with watching_consumers(nowhere, "MEMORYD", ["memoryd-stm"], task="t", progress=quiet):
        pass


def test_a_bench_run_ends_with_its_figures_and_each_systems_targets() -> None:
    """The pipeline's figures one per row; retrieval's systems side by side with targets."""
    figures = shown(figures_table("memoryd bench pipeline", {"log_append_events_per_s": 25958}))
    overall = GroupSummary(means={"session.recall_all@5": 0.98}, counts={"session.recall_all@5": 5})
    evaluation = Evaluation(overall=overall, by_group={})
    report = BenchReport(
        dataset="locomo",
        systems={"fused": evaluation},
        targets={"session.recall_all@5": 0.9},
    )
    summary = shown(summary_table(report))

    assert "log_append_events_per_s" in figures and "25,958" in figures
    assert "locomo: overall" in summary and "fused" in summary
    assert "0.980" in summary and ">= 0.90" in summary
