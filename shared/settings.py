"""All configuration, from one pydantic-settings class (environment prefix MEMORYD_)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """memoryd settings; every field can be set as MEMORYD_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="MEMORYD_", frozen=True)

    # Where the embedded default keeps its state (JetStream files, SQLite database).
    data_dir: Path = Path(".memoryd")
    # An external NATS (production); unset means "spawn the embedded nats-server".
    nats_url: str | None = None
    embedded_nats_host: str = "127.0.0.1"
    embedded_nats_port: int = 14222
    # An external database (production: postgresql+asyncpg://...); unset means SQLite in data_dir.
    database_url: str | None = None

    stream_name: str = "MEMORYD"
    stream_replicas: int = Field(default=1, ge=1, le=5)
    duplicate_window_seconds: float = Field(default=300.0, gt=0)
    dead_letter_stream: str = "MEMORYD_DLQ"

    stm_capacity: int = Field(default=7, ge=1, le=1000)
    batch_size: int = Field(default=256, ge=1, le=10_000)
    # How long an idle worker's fetch waits before asking again (it returns at once on a message).
    idle_poll_seconds: float = Field(default=5.0, gt=0)
    # A message whose processing fails this many times is parked in the dead-letter stream.
    max_attempts: int = Field(default=5, ge=1, le=100)
    ack_wait_seconds: float = Field(default=30.0, gt=0)
    daily_ttl_days: int = Field(default=30, ge=1)

    log_format: Literal["auto", "console", "json"] = "auto"
    log_level: str = "INFO"

    def resolved_database_url(self) -> str:
        """Return the configured database URL, or the embedded SQLite file."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'memoryd.db').resolve()}"

    def embedded_nats_url(self) -> str:
        """Return the URL the embedded nats-server listens on."""
        return f"nats://{self.embedded_nats_host}:{self.embedded_nats_port}"
