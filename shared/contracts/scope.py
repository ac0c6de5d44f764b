"""Who a memory belongs to: the scope carried by every event and every request."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

# Scope values become NATS subject tokens and SQL keys: letters, digits, '-' and '_' only,
# so a value can never inject a wildcard ('*', '>') or an extra token ('.').
SAFE_TOKEN_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

ScopeToken = Annotated[str, StringConstraints(pattern=SAFE_TOKEN_PATTERN)]

DEFAULT_AGENT = "default"
DEFAULT_NAMESPACE = "default"


class Scope(BaseModel):
    """Where an event happened: tenant (hard wall), user, agent, session and namespace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: ScopeToken
    user_id: ScopeToken
    agent_id: ScopeToken = DEFAULT_AGENT
    session_id: ScopeToken | None = None
    namespace: ScopeToken = DEFAULT_NAMESPACE


class SearchScope(StrEnum):
    """How wide a recall looks inside the tenant."""

    AGENT = "agent"  # this user with this agent (the default)
    USER = "user"  # this user with every agent
    SESSION = "session"  # this user's current session only
    GLOBAL = "global"  # the whole tenant
