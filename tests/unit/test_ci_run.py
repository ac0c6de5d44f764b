""".ci/run runs the lint, format and type gates before the tests, as the README says it does."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATES = ("ruff check .", "ruff format --check .", "mypy -p memoryd.shared -p memoryd.services")
PYTEST = "python -m pytest -q -p no:cacheprovider"
ENV_ASSIGNMENTS = re.compile(r"^(?:\w+=\S+\s+)+")
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)
EXTRAS = re.compile(r'pip install [^&\n]*-e "\.\[([\w,]+)\]"')


def ci_checks() -> list[str]:
    """Return the commands .ci/run runs once the project is installed."""
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    installed = max(i for i, line in enumerate(lines) if "pip install" in line)
    return [
        line for line in lines[installed + 1 :] if line and not line.startswith(("#", "export "))
    ]


def readme_test_command() -> str:
    """Return the README's test command (the bash block that runs pytest)."""
    (command,) = [b for b in BASH_BLOCK.findall((ROOT / "README.md").read_text()) if PYTEST in b]
    return str(command)


def readme_checks() -> list[str]:
    """Return the commands of the README's test command that follow its install step."""
    command = readme_test_command()
    steps = [step.strip() for step in command.split("&&")]
    installed = max(i for i, step in enumerate(steps) if "pip install" in step)
    return [ENV_ASSIGNMENTS.sub("", step) for step in steps[installed + 1 :]]


def test_ci_runs_the_gates_then_the_tests() -> None:
    """ruff check, ruff format --check and mypy run, in that order, before pytest."""
    assert [*GATES, PYTEST] == ci_checks()


def test_readme_test_command_is_what_ci_runs() -> None:
    """The README's test command runs the same checks in the same order as .ci/run."""
    assert ci_checks() == readme_checks()


def test_readme_installs_the_extras_ci_installs() -> None:
    """Both install the project with the same extras, peers included (mem0, for bench peers)."""
    (ci_extras,) = EXTRAS.findall((ROOT / ".ci" / "run").read_text())
    (readme_extras,) = EXTRAS.findall(readme_test_command())

    assert ["local", "peers", "test"] == sorted(ci_extras.split(","))
    assert sorted(ci_extras.split(",")) == sorted(readme_extras.split(","))
