"""Export the contracts as JSON Schema files into schemas/."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from memoryd.shared.contracts.catalog import EVENT_TYPES
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.contracts.recall import RecallError, RecallRequest, RecallResponse

CONTRACTS: tuple[type[BaseModel], ...] = (
    *EVENT_TYPES,
    RecallRequest,
    RecallResponse,
    RecallError,
    MemoryUpdated,
)


def schema_file_name(model: type[BaseModel]) -> str:
    """Name the schema file after the event's versioned type, else after the class."""
    type_field = model.model_fields.get("type")
    if type_field is not None and isinstance(type_field.default, str):
        return f"{type_field.default}.json"
    return f"{model.__name__}.json"


def render_schemas() -> dict[str, str]:
    """Return file name -> JSON Schema text for every contract."""
    return {
        schema_file_name(model): json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for model in CONTRACTS
    }


def write_schemas(folder: Path) -> list[Path]:
    """Write every contract's schema into ``folder``, removing stale files."""
    folder.mkdir(parents=True, exist_ok=True)
    rendered = render_schemas()
    for stale in folder.glob("*.json"):
        if stale.name not in rendered:
            stale.unlink()
    written = []
    for name, text in rendered.items():
        path = folder / name
        path.write_text(text)
        written.append(path)
    return written
