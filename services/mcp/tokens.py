"""Bearer tokens to scopes: who an HTTP caller of the MCP server is, and the wall around it.

The token file is JSON, one entry per token: ``{"<token>": {"tenant": "acme", "user_id":
"alice", "agent_id": "travel-bot"}}`` (a ``Scope``: ``session_id`` and ``namespace`` may be
given too). Only the tokens' SHA-256 digests are kept in memory, and no token ever reaches a
log or an error message: a bad entry is named by its position in the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from memoryd.services.runtime.tokens import (
    MIN_TOKEN_CHARS,
    load_tokens,
    parse_tokens,
    token_digest,
)
from memoryd.services.runtime.tokens import bearer_token as _bearer_token
from memoryd.shared.contracts.scope import Scope

log = structlog.get_logger(__name__)

__all__ = [
    "MIN_TOKEN_CHARS",
    "SCOPE_KEY",
    "BearerScopes",
    "bearer_token",
    "load_token_map",
    "parse_token_map",
    "token_digest",
]

# Where the bound scope travels with an HTTP request (the ASGI scope of its connection).
SCOPE_KEY = "memoryd.scope"


def parse_token_map(text: str) -> dict[str, Scope]:
    """Return token digest -> scope from the token file's JSON; ``ValueError`` names the entry.

    Every entry must be a whole ``Scope`` (MCP tools never name a user) and every token at
    least ``MIN_TOKEN_CHARS`` long.
    """
    return parse_tokens(text, Scope.model_validate)


def load_token_map(path: Path) -> dict[str, Scope]:
    """Read the token file at ``path`` (see ``parse_token_map``)."""
    return load_tokens(path, Scope.model_validate)


def bearer_token(headers: Headers) -> str | None:
    """Return the bearer token of an ``Authorization`` header (None: there is none)."""
    return _bearer_token(headers.get("authorization"))


def _principal(digest: str, scope: Scope) -> AuthenticatedUser:
    """Return the user the MCP SDK ties a session to, so another token cannot take it over."""
    client_id = f"{scope.tenant}/{scope.user_id}/{scope.agent_id}"
    return AuthenticatedUser(AccessToken(token=digest, client_id=client_id, scopes=[]))


class BearerScopes:
    """Refuse HTTP requests without a known bearer token (401); bind the token's scope."""

    def __init__(self, app: ASGIApp, scopes: Mapping[str, Scope]) -> None:
        """Serve ``app`` to callers whose token digest is in ``scopes``."""
        self.app = app
        self.scopes = scopes

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        """Pass a known caller on with its scope at ``SCOPE_KEY``; answer others 401."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = bearer_token(Headers(scope=scope))
        digest = token_digest(token) if token is not None else None
        bound = self.scopes.get(digest) if digest is not None else None
        if digest is None or bound is None:
            log.info("mcp_unauthorised", path=scope.get("path"), had_token=token is not None)
            await _refusal(token is not None)(scope, receive, send)
            return
        scope[SCOPE_KEY] = bound
        scope["user"] = _principal(digest, bound)
        await self.app(scope, receive, send)


def _refusal(had_token: bool) -> JSONResponse:
    description = "unknown bearer token" if had_token else "a bearer token is required"
    challenge = f'Bearer error="invalid_token", error_description="{description}"'
    return JSONResponse(
        {"error": "invalid_token", "error_description": description},
        status_code=401,
        headers={"WWW-Authenticate": challenge},
    )
