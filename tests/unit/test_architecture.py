"""The house reads top-down: cli -> bootstrap -> services -> runtime -> shared, no arrow between
services. Checked on the import statements of every module (ast), so a new arrow fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The composition root and the tools on top of it may import any service (erasure: the texts
# every service embedded for a user, so their cached vectors go too).
TOP = {"bootstrap", "cli", "demo", "bench", "erasure"}


def imported_modules(path: Path) -> set[str]:
    """Return the absolute module names a file imports (including inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def layer_of(path: Path) -> str:
    """Return ``shared``, ``runtime``, a service's name, or a TOP module's name."""
    relative = path.relative_to(ROOT).parts
    if relative[0] == "shared":
        return "shared"
    return relative[1].removesuffix(".py")


def allowed(layer: str, module: str) -> bool:
    """Say whether code in ``layer`` may import ``module``."""
    if not module.startswith("memoryd.services"):
        return True
    target = module.split(".")[2] if module.count(".") >= 2 else ""
    if layer == "shared":
        return False
    if layer in TOP:
        return True
    return target in {"runtime", layer}


def sources() -> list[Path]:
    return sorted([*(ROOT / "shared").rglob("*.py"), *(ROOT / "services").rglob("*.py")])


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_what_is_below_it(path: Path) -> None:
    """shared imports no service; runtime no other service; a service only runtime and itself."""
    layer = layer_of(path)

    wrong = sorted(m for m in imported_modules(path) if not allowed(layer, m))

    assert [] == wrong
