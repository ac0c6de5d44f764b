"""The tables the commands for people print."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from memoryd.services import people
from memoryd.services.runtime.replay import ReplayReport


def shown(table: Table) -> str:
    console = Console(record=True, width=200)
    console.print(table)
    return console.export_text()


def test_the_replay_summary_names_rate_projections_and_checksums() -> None:
    report = ReplayReport(
        events=1_200,
        events_by_type=Counter({"turn.recorded.v1": 1_200}),
        seconds=0.6,
        targets={"memoryd-stm": 1_250},
        checksums={"stm_pages": "ab12"},
        folds={"memoryd-stm": 0.25},
    )
    text = shown(people.replay_table(report))
    assert "replayed 1,200 events in 0.60s (2,000 events/s)" in text
    assert "memoryd-stm" in text and "1,250" in text and "0.25" in text
    assert "stm_pages" in text and "ab12" in text


def test_the_status_says_which_projection_never_ran() -> None:
    text = shown(
        people.status_table(9, {"memoryd-stm": (9, 0), "memoryd-graph": None}, {"memoryd-stm": 2})
    )
    assert "the log holds 9 events" in text
    assert "never ran" in text
    assert "memoryd-stm" in text and "2" in text
