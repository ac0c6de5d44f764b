"""The README's set-up says how to get the CPU build of torch, as infra/Dockerfile gets it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
BASH_BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def torch_pin() -> str:
    """Return the torch requirement of the local extra, e.g. ``torch==2.13.0``."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [r for r in extras["optional-dependencies"]["local"] if r.startswith("torch")]
    return str(pin)


def readme_bash_blocks() -> list[str]:
    """Return the README's ```bash blocks."""
    return BASH_BLOCK.findall((ROOT / "README.md").read_text())


def test_dockerfile_installs_the_pinned_cpu_build() -> None:
    """The image installs the local extra's torch from PyTorch's CPU index."""
    assert (
        f"pip install --no-cache-dir {torch_pin()} {CPU_INDEX}"
        in (ROOT / "infra" / "Dockerfile").read_text()
    )


def test_readme_shows_the_cpu_build_command() -> None:
    """The README gives the same CPU-index command as the image, for the user to run first."""
    commands = [block for block in readme_bash_blocks() if CPU_INDEX in block]
    assert 1 == len(commands)
    assert f"pip install {torch_pin()} {CPU_INDEX}" in commands[0]
    assert "pip install -e" not in commands[0]


def test_readme_set_up_lines_need_only_the_package_index() -> None:
    """The two set-up lines install from the configured index (offline machines run them)."""
    set_up = [block for block in readme_bash_blocks() if "pip install -e" in block]
    assert 2 == len(set_up)
    assert not any("download.pytorch.org" in block for block in set_up)
