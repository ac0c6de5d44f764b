"""The built wheel: a non-editable install (as in infra/Dockerfile) holds every module.

The test builds the wheel from a copy of the project, installs it with ``--no-deps`` into a
fresh virtual environment and imports every module found by walking ``memoryd.*`` there. The
dependencies come from this test environment's site-packages through a ``.pth`` line: a
directory added that way has its own ``.pth`` files ignored, so the editable install of the
repository (``__editable__*.pth``) stays inactive, and the child runs isolated (``-I``) from a
directory outside the repository, so the top-level ``shared/`` and ``services/`` cannot shadow.
Deselect with ``-m "not packaging"`` (it takes ~20 s).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
# The distribution maps these top-level folders to memoryd.<folder> (package-dir).
SOURCE_FOLDERS = ("shared", "services")
# Left out of the copy the wheel is built from: local state, caches and what is not packaged.
NOT_COPIED_AT_TOP = {".git", ".venv", "venv", "build", "dist", ".memoryd", "bench", "tests"}
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.egg-info", ".*_cache", ".hypothesis", "*.db")


def not_sources(folder: str, names: list[str]) -> set[str]:
    """Name what copytree leaves out of ``folder``."""
    top = NOT_COPIED_AT_TOP & set(names) if Path(folder) == ROOT else set()
    return top | NOT_COPIED(folder, names)


IMPORT_EVERY_MODULE = textwrap.dedent(
    """
    import importlib, importlib.resources, json, pkgutil, sys

    import memoryd

    def stop(name):
        raise  # walk_packages calls this inside its except block: keep the real error

    files = {}
    for info in pkgutil.walk_packages(memoryd.__path__, "memoryd.", onerror=stop):
        files[info.name] = importlib.import_module(info.name).__file__
    traits = importlib.resources.files("memoryd.shared.domain") / "traits.toml"
    browser = importlib.resources.files("memoryd.services.http") / "browser.html"
    print(json.dumps({
        "files": files,
        "traits_toml": traits.is_file(),
        "browser_html": browser.is_file(),
        "editable_finders": [
            name for name in sys.modules if name.startswith("__editable__")
        ] + [repr(finder) for finder in sys.meta_path if "editable" in repr(finder).lower()],
    }))
    """
)


def run(args: list[str | Path], cwd: Path, timeout: float = 300) -> str:
    """Run a command; fail the test with its output if it exits non-zero."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert 0 == done.returncode, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def source_modules() -> set[str]:
    """Return the dotted name of every module in the source folders."""
    names = set()
    for folder in SOURCE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.add(".".join(("memoryd", *parts)))
    return names


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Build the wheel, install it without -e into a new venv; return (python, site-packages)."""
    work = tmp_path_factory.mktemp("packaging")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=not_sources, symlinks=True)
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "--no-deps", *isolation, "-w", work / "dist", source], cwd=work)
    (wheel,) = (work / "dist").glob("memoryd-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    python = venv / "bin" / "python"
    run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel], cwd=work)
    site_packages = Path(
        run(
            [python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], work
        ).strip()
    )
    dependencies = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site_packages / "test_dependencies.pth").write_text("\n".join(sorted(dependencies)) + "\n")
    return python, site_packages


def test_wheel_installs_and_imports_every_module(
    fresh_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """Every module of shared/ and services/ imports from the installed wheel."""
    python, site_packages = fresh_venv
    found = json.loads(run([python, "-I", "-c", IMPORT_EVERY_MODULE], cwd=tmp_path))
    assert [] == found["editable_finders"]
    assert source_modules() == set(found["files"])
    outside = {
        name: file
        for name, file in found["files"].items()
        if not Path(file).resolve().is_relative_to(site_packages.resolve())
    }
    assert {} == outside
    assert found["traits_toml"]
    assert found["browser_html"]  # the memory browser's page is package data


def test_console_script_starts_from_the_wheel(
    fresh_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """The installed `memoryd` command gets past its imports (as `memoryd up` in the image)."""
    python, _ = fresh_venv
    assert "replay" in run([python.parent / "memoryd", "--help"], cwd=tmp_path)
