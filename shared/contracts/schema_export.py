"""Export the contracts as JSON Schema files into schemas/, and the notification catalogue as
the Markdown table docs/architecture.md shows."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from memoryd.shared import subjects
from memoryd.shared.contracts.asyncapi import asyncapi_document
from memoryd.shared.contracts.browse import BrowseError, BrowseRequest, UserMemory
from memoryd.shared.contracts.catalog import EVENT_TYPES
from memoryd.shared.contracts.events import type_name
from memoryd.shared.contracts.memories import ListMemoriesError, ListMemoriesRequest, MemoryList
from memoryd.shared.contracts.notifications import NOTIFICATION_TYPES, MemoryUpdated
from memoryd.shared.contracts.recall import RecallError, RecallRequest, RecallResponse

CONTRACTS: tuple[type[BaseModel], ...] = (
    *EVENT_TYPES,
    RecallRequest,
    RecallResponse,
    RecallError,
    ListMemoriesRequest,
    MemoryList,
    ListMemoriesError,
    BrowseRequest,
    UserMemory,
    BrowseError,
    MemoryUpdated,
    *NOTIFICATION_TYPES,
)


def schema_file_name(model: type[BaseModel]) -> str:
    """Name the schema file after the event's versioned type, or the notification's kind and
    version (prefixed: kinds and event types share names), else after the class."""
    type_field = model.model_fields.get("type")
    if type_field is not None and isinstance(type_field.default, str):
        return f"{type_field.default}.json"
    if issubclass(model, MemoryUpdated) and model.caused_by:
        return f"notification.{model.contract_name()}.json"
    return f"{model.__name__}.json"


ASYNCAPI_FILE = "asyncapi.json"


def render_schemas() -> dict[str, str]:
    """Return file name -> JSON Schema text for every contract, and the AsyncAPI document."""
    rendered = {
        schema_file_name(model): json.dumps(model.model_json_schema(), indent=2, sort_keys=True)
        + "\n"
        for model in CONTRACTS
    }
    rendered[ASYNCAPI_FILE] = json.dumps(asyncapi_document(), indent=2) + "\n"
    return rendered


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


NOTIFICATION_TABLE_HEADER = (
    "| kind | version | what it says | caused by (the event `event_id` names) | published by "
    "| `item_ids` | subject |\n"
    "|---|---|---|---|---|---|---|\n"
)


def notification_row(model: type[MemoryUpdated]) -> str:
    """Return one kind's row of the notification table."""
    summary = (model.__doc__ or "").strip().splitlines()[0]
    causes = ", ".join(f"`{type_name(cause)}`" for cause in model.caused_by)
    cells = [
        f"`{model.kind_name()}`",
        str(model.model_fields["version"].default),
        summary,
        causes,
        f"`{model.published_by}`",
        str(model.model_fields["item_ids"].description),
        f"`{subjects.notify_subject_pattern(model.kind_name())}`",
    ]
    return f"| {' | '.join(cells)} |\n"


def notification_table() -> str:
    """Return the notification catalogue as a Markdown table, one row per kind."""
    return NOTIFICATION_TABLE_HEADER + "".join(map(notification_row, NOTIFICATION_TYPES))
