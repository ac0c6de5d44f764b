"""Tests for the benchmark report writer."""

from __future__ import annotations

from pathlib import Path

from memoryd.services.bench.metrics import Evaluation, GroupSummary
from memoryd.services.bench.report import BenchReport, render_markdown, write_report

METRIC = "session.recall_all@5"


def _evaluation(overall: float, temporal: float) -> Evaluation:
    return Evaluation(
        overall=GroupSummary(means={METRIC: overall}, counts={METRIC: 49}),
        by_group={"temporal": GroupSummary(means={METRIC: temporal}, counts={METRIC: 13})},
        excluded=2,
    )


def _report() -> BenchReport:
    return BenchReport(
        dataset="longmemeval_s dev",
        systems={"bm25": _evaluation(0.8, 0.5), "fused": _evaluation(0.95, 0.75)},
        targets={METRIC: 0.95},
        notes={"embedder": "all-MiniLM-L6-v2"},
    )


def test_markdown_puts_systems_side_by_side() -> None:
    """Each group is one row with n, every system's value and the target on the overall row."""
    markdown = render_markdown(_report(), metrics=[METRIC])
    assert "| group | n | bm25 | fused | target |" in markdown
    assert "| overall | 49 | 0.800 | 0.950 | >= 0.95 |" in markdown
    assert "| temporal | 13 | 0.500 | 0.750 |  |" in markdown


def test_markdown_marks_missing_metrics() -> None:
    """A metric no system measured shows n/a instead of failing."""
    markdown = render_markdown(_report(), metrics=["turn.recall_all@10"])
    assert "| overall | n/a | n/a | n/a |  |" in markdown


def test_write_report_round_trips_json(tmp_path: Path) -> None:
    """The JSON file reloads into the same report and the markdown file is written."""
    json_path, markdown_path = tmp_path / "out" / "report.json", tmp_path / "report.md"
    write_report(_report(), json_path, markdown_path, metrics=[METRIC])
    assert _report() == BenchReport.model_validate_json(json_path.read_text())
    assert render_markdown(_report(), metrics=[METRIC]) == markdown_path.read_text()
