"""Load the 90 MemoryOS user-trait dimensions from ``memoryd.shared.domain/traits.toml``."""

import tomllib
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["Trait", "TraitGroup", "load_traits"]

TraitGroup = Literal["basic_needs_and_personality", "ai_alignment", "content_interests"]


class Trait(BaseModel):
    """One user-trait dimension, with the cue words the offline extractor looks for."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    group: TraitGroup
    label: str
    description: str
    cues: tuple[str, ...]


@cache
def load_traits() -> tuple[Trait, ...]:
    """Return the trait dimensions in file order, read once per process."""
    source = resources.files("memoryd.shared.domain").joinpath("traits.toml")
    document = tomllib.loads(source.read_text(encoding="utf-8"))
    return tuple(Trait.model_validate(entry) for entry in document["traits"])
