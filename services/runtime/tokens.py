"""Bearer tokens to what they grant: who an HTTP caller is, for `memoryd mcp` and `memoryd http`.

A token file is JSON, one entry per token: ``{"<token>": {"tenant": "acme", "user_id":
"alice", "agent_id": "travel-bot"}}``. Each interface validates the entries as what it serves
(MCP: a whole ``Scope``; the HTTP API: a ``Grant``, where every field but the tenant may be
left for the request to name). Only the tokens' SHA-256 digests are kept in memory, and no
token ever reaches a log or an error message: a bad entry is named by its position in the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.scope import Scope, ScopeToken

# A short token can be guessed; the file is refused rather than served.
MIN_TOKEN_CHARS = 16

T = TypeVar("T")


class ScopeOverride(PermissionError):
    """A request named a scope field its token binds to another value: nothing was done."""


class Grant(BaseModel):
    """What one token binds: always a tenant; a user, agent, session, namespace if it names them.

    A field the grant leaves out is the request's to name (a tenant-wide token names the user
    per request); a field it binds can never be named otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: ScopeToken
    user_id: ScopeToken | None = None
    agent_id: ScopeToken | None = None
    session_id: ScopeToken | None = None
    namespace: ScopeToken | None = None

    @property
    def tenant_wide(self) -> bool:
        """Say whether the token serves every user of its tenant."""
        return self.user_id is None

    def bound(self, name: str, asked: str | None) -> str | None:
        """Return field ``name`` of a request that asked for ``asked`` (None: did not name it).

        Raises ``ScopeOverride`` when the token binds the field to another value.
        """
        bound: str | None = getattr(self, name)
        if bound is not None and asked is not None and asked != bound:
            raise ScopeOverride(f"{name}: this token is bound to another {name}")
        return bound if bound is not None else asked

    def scope(self, named: dict[str, str | None]) -> Scope:
        """Return the scope of a request that ``named`` these fields (None: not named).

        Raises ``ScopeOverride`` when a named field differs from the one bound, and
        ``ValidationError`` when the result is no scope (a tenant-wide token, no user named).
        """
        fields = {"tenant": self.tenant}
        self.bound("tenant", named.get("tenant"))  # never another: refused, not ignored
        for name in ("user_id", "agent_id", "session_id", "namespace"):
            value = self.bound(name, named.get(name))
            if value is not None:
                fields[name] = value
        return Scope.model_validate(fields)


def token_digest(token: str) -> str:
    """Return the SHA-256 hex digest a token is kept and looked up as."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_tokens(text: str, validate: Callable[[Any], T]) -> dict[str, T]:
    """Return token digest -> entry from a token file's JSON; ``ValueError`` names the entry.

    ``validate`` turns each entry into what it grants (``Scope.model_validate``,
    ``Grant.model_validate``); every token must be at least ``MIN_TOKEN_CHARS`` long.
    """
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error.msg} at line {error.lineno}") from None
    if not isinstance(entries, dict) or not entries:
        raise ValueError('expected an object of tokens to scopes: {"<token>": {"tenant": ...}}')
    return {
        token_digest(token): _entry(number, token, entry, validate)
        for number, (token, entry) in enumerate(entries.items(), 1)
    }


def _entry(number: int, token: str, entry: Any, validate: Callable[[Any], T]) -> T:
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"token #{number} is shorter than {MIN_TOKEN_CHARS} characters")
    try:
        return validate(entry)
    except ValidationError as error:
        raise ValueError(f"token #{number}: {describe_validation_error(error)}") from None


def load_tokens(path: Path, validate: Callable[[Any], T]) -> dict[str, T]:
    """Read the token file at ``path`` (see ``parse_tokens``)."""
    return parse_tokens(path.read_text(), validate)


def bearer_token(authorization: str | None) -> str | None:
    """Return the token of an ``Authorization: Bearer <token>`` header (None: there is none)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
