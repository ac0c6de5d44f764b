"""Write benchmark results as JSON and as markdown tables, several systems side by side."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from rich.table import Table

from memoryd.services.bench.metrics import OVERALL, Evaluation, GroupSummary

__all__ = [
    "DEFAULT_TABLE_METRICS",
    "BenchReport",
    "figures_table",
    "render_markdown",
    "summary_table",
    "write_report",
]

DEFAULT_TABLE_METRICS: tuple[str, ...] = (
    "session.recall_all@5",
    "session.recall_any@5",
    "session.ndcg_any@10",
    "session.recall_all@10",
    "turn.recall_all@10",
)
_MISSING = "n/a"


class BenchReport(BaseModel):
    """The results of several systems on one dataset, with optional targets per metric."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: str
    systems: dict[str, Evaluation]
    targets: dict[str, float] = {}
    notes: dict[str, str] = {}


def _groups(report: BenchReport) -> list[str]:
    named = {group for evaluation in report.systems.values() for group in evaluation.by_group}
    return [OVERALL, *sorted(named)]


def _summary(evaluation: Evaluation, group: str) -> GroupSummary | None:
    return evaluation.overall if group == OVERALL else evaluation.by_group.get(group)


def _count(report: BenchReport, group: str, metric: str) -> str:
    # Systems score the same questions, so the first system that has the metric gives n.
    for evaluation in report.systems.values():
        summary = _summary(evaluation, group)
        if summary is not None and metric in summary.counts:
            return str(summary.counts[metric])
    return _MISSING


def _value(evaluation: Evaluation, group: str, metric: str) -> str:
    summary = _summary(evaluation, group)
    if summary is None or metric not in summary.means:
        return _MISSING
    return f"{summary.means[metric]:.3f}"


def _target(report: BenchReport, group: str, metric: str) -> str:
    if group != OVERALL or metric not in report.targets:
        return ""
    return f">= {report.targets[metric]:.2f}"


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(report: BenchReport, metric: str) -> list[str]:
    systems = list(report.systems)
    header = ["group", "n", *systems, "target"]
    rows = [
        _row(
            [
                group,
                _count(report, group, metric),
                *(_value(report.systems[name], group, metric) for name in systems),
                _target(report, group, metric),
            ]
        )
        for group in _groups(report)
    ]
    return [f"### {metric}", "", _row(header), _row(["---"] * len(header)), *rows, ""]


def render_markdown(report: BenchReport, metrics: Sequence[str] = DEFAULT_TABLE_METRICS) -> str:
    """Render one table per metric: groups as rows, systems as columns."""
    excluded = {evaluation.excluded for evaluation in report.systems.values()}
    lines = [f"## {report.dataset}", ""]
    lines += [f"Abstention questions excluded: {', '.join(map(str, sorted(excluded)))}.", ""]
    lines += [f"- {key}: {value}" for key, value in report.notes.items()]
    lines += [""] if report.notes else []
    for metric in metrics:
        lines += _table(report, metric)
    return "\n".join(lines)


def write_report(
    report: BenchReport,
    json_path: Path,
    markdown_path: Path,
    metrics: Sequence[str] = DEFAULT_TABLE_METRICS,
) -> None:
    """Write the full report as JSON and the chosen metrics as a markdown table."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    markdown_path.write_text(render_markdown(report, metrics), encoding="utf-8")


def figures_table(title: str, figures: Mapping[str, Any]) -> Table:
    """Render a run's figures, one per row, for the terminal that ran it."""
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        table.add_row(name, f"{value:,}" if isinstance(value, int) else str(value))
    return table


def summary_table(report: BenchReport, metrics: Sequence[str] = DEFAULT_TABLE_METRICS) -> Table:
    """Render each system's overall figures on one dataset, the targets beside them."""
    table = Table(title=f"{report.dataset}: overall")
    table.add_column("metric")
    for system in report.systems:
        table.add_column(system, justify="right")
    table.add_column("target", justify="right")
    for metric in metrics:
        values = [_value(evaluation, OVERALL, metric) for evaluation in report.systems.values()]
        table.add_row(metric, *values, _target(report, OVERALL, metric))
    return table
