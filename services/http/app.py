"""`memoryd http`: memoryd's operations as a versioned HTTP API, notifications as server-sent
events.

A thin adapter over the SDK: each route binds the caller's scope, calls ``MemoryClient`` and
answers with the contract it returns (``RecallResponse``, ``MemoryList``...). Whose memory a
request reads or writes comes from its bearer token (``MEMORYD_HTTP_TOKENS_FILE``): the token
binds a tenant, and a user, agent, session or namespace if its entry names them; a field it
leaves out may be named in the query string (``?user_id=alice``: a tenant-wide token), a field
it binds never otherwise (403). The one ``MemoryClient`` is connected in the lifespan.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from importlib import resources
from importlib.metadata import version
from typing import Annotated, Any, Literal, cast

import structlog
import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError
from starlette.types import Receive

from memoryd.services.http.errors import ApiError, install_error_handlers
from memoryd.services.runtime.tokens import Grant, ScopeOverride, load_tokens, token_digest
from memoryd.shared.client import MemoryClient
from memoryd.shared.client.notifications import Start
from memoryd.shared.client.tools import RecordTurnArguments, RememberArguments
from memoryd.shared.contracts.browse import MAX_BROWSED, UserMemory
from memoryd.shared.contracts.events import Category, MemoryKey
from memoryd.shared.contracts.http import (
    ErrorBody,
    ForgetAccepted,
    MemoryAccepted,
    MemoryHistory,
    TurnAccepted,
)
from memoryd.shared.contracts.memories import MAX_LISTED, MemoryList
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.contracts.recall import RecallOptions, RecallResponse
from memoryd.shared.contracts.scope import SAFE_TOKEN_PATTERN, Scope, SearchScope
from memoryd.shared.domain.memories import memory_id_for_key
from memoryd.shared.settings import Settings, StartupError

log = structlog.get_logger(__name__)

API_PREFIX = "/v1"
# An idle event stream sends a comment this often, so proxies and clients keep it open.
PING_SECONDS = 15.0
RECALL_TIMEOUT_SECONDS = 5.0
# How long a stopping server waits for its NATS connection to drain.
CLOSE_SECONDS = 2.0
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        401: "No bearer token, or one not in the token file (`unauthorized`)",
        403: "The request names a scope its token does not grant (`forbidden`)",
        422: "Bad input, the field named (`invalid_request`)",
        503: "memoryd at capacity or not answering (`overloaded`, `unavailable`)",
        504: "memoryd did not answer in time (`deadline_exceeded`)",
    }.items()
}

SSE_DESCRIPTION = (
    "Server-sent events, one per notification: `id` its notification stream sequence, `event` "
    "its kind, `data` the notification (schemas/MemoryUpdated.json and its kinds)"
)

bearer = HTTPBearer(auto_error=False, description="A token of MEMORYD_HTTP_TOKENS_FILE")
ScopeField = Annotated[str | None, Query(pattern=SAFE_TOKEN_PATTERN)]


# --- who is asking ---------------------------------------------------------------------------
def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Grant:
    """Return what the request's bearer token grants; 401 without a known one."""
    if credentials is None:
        raise _unauthorised("a bearer token is required")
    grants: Mapping[str, Grant] = request.app.state.grants
    grant = grants.get(token_digest(credentials.credentials))
    if grant is None:
        raise _unauthorised("unknown bearer token")
    return grant


def _unauthorised(message: str) -> ApiError:
    challenge = f'Bearer error="invalid_token", error_description="{message}"'
    return ApiError("unauthorized", message, {"WWW-Authenticate": challenge})


def _bound(grant: Grant, name: str, asked: str | None) -> str | None:
    try:
        return grant.bound(name, asked)
    except ScopeOverride as refused:
        raise ApiError("forbidden", str(refused)) from None


def request_scope(
    *,
    grant: Annotated[Grant, Depends(caller)],
    tenant: ScopeField = None,
    user_id: ScopeField = None,
    agent_id: ScopeField = None,
    session_id: ScopeField = None,
    namespace: ScopeField = None,
) -> Scope:
    """Return the scope a request reads or writes: its token's, plus what the token leaves out."""
    named = {"tenant": tenant, "user_id": user_id, "agent_id": agent_id}
    try:
        return grant.scope(named | {"session_id": session_id, "namespace": namespace})
    except ScopeOverride as refused:
        raise ApiError("forbidden", str(refused)) from None
    except ValidationError:  # the one field no query parameter pattern checks: a missing user
        raise ApiError(
            "invalid_request", "user_id: this token serves a whole tenant: name a user"
        ) from None


def check_reach(grant: Grant, search_scope: SearchScope) -> None:
    """Refuse a whole-tenant search to a token that serves one user (403)."""
    if search_scope == SearchScope.GLOBAL and not grant.tenant_wide:
        raise ApiError("forbidden", "search_scope: global reads every user: this token serves one")


def client_of(request: Request) -> MemoryClient:
    """Return the app's one ``MemoryClient`` (connected in the lifespan)."""
    return cast(MemoryClient, request.app.state.client)


Caller = Annotated[Grant, Depends(caller)]
RequestScope = Annotated[Scope, Depends(request_scope)]
Client = Annotated[MemoryClient, Depends(client_of)]

router = APIRouter(prefix=API_PREFIX, responses=ERRORS)


# --- writes ----------------------------------------------------------------------------------
@router.post("/turns", status_code=202, tags=["conversation"])
async def record_turn(
    body: RecordTurnArguments, scope: RequestScope, client: Client
) -> TurnAccepted:
    """Record one exchange of the conversation."""
    return TurnAccepted(turn_id=await client.record_turn(scope, body.query, body.response))


@router.post("/memories", status_code=202, tags=["memories"])
async def remember(body: RememberArguments, scope: RequestScope, client: Client) -> MemoryAccepted:
    """Store one explicit memory (the same key again replaces it)."""
    fields = body.model_dump(exclude={"content"})
    memory_id = await client.remember(scope, body.content, **fields)
    return MemoryAccepted(memory_id=memory_id, key=body.key)


@router.delete("/memories/{memory_id}", status_code=202, tags=["memories"])
async def forget(memory_id: uuid.UUID, scope: RequestScope, client: Client) -> ForgetAccepted:
    """Forget one memory by its id."""
    await client.forget(scope, memory_id=memory_id)
    return ForgetAccepted(memory_id=memory_id, key=None)


@router.delete("/memories/by-key/{key}", status_code=202, tags=["memories"])
async def forget_key(key: MemoryKey, scope: RequestScope, client: Client) -> ForgetAccepted:
    """Forget one memory by its key."""
    await client.forget(scope, key=key)
    return ForgetAccepted(memory_id=None, key=key)


# --- reads -----------------------------------------------------------------------------------
@router.post("/recall", tags=["recall"])
async def recall(
    body: RecallOptions, grant: Caller, scope: RequestScope, client: Client
) -> RecallResponse:
    """Return the memory context of a query within ``max_tokens``."""
    check_reach(grant, body.search_scope)
    options = body.model_dump(exclude_none=True, exclude={"query"})
    return await client.recall(scope, body.query, timeout=RECALL_TIMEOUT_SECONDS, **options)


@router.get("/memories", tags=["memories"])
async def list_memories(
    *,
    grant: Caller,
    scope: RequestScope,
    client: Client,
    search_scope: SearchScope = SearchScope.AGENT,
    category: Annotated[list[Category] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LISTED)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> MemoryList:
    """List the explicit memories kept, most recently changed first (page with ``offset``)."""
    check_reach(grant, search_scope)
    return await client.list_memories(
        scope, search_scope=search_scope, categories=category, limit=limit, offset=offset
    )


@router.get("/memories/{memory_id}/history", tags=["memories"])
async def history(memory_id: uuid.UUID, scope: RequestScope, client: Client) -> MemoryHistory:
    """Return every version of one memory of the user, oldest first."""
    versions = await client.memory_history(scope, memory_id=memory_id)
    return MemoryHistory(memory_id=memory_id, versions=versions)


@router.get("/memories/by-key/{key}/history", tags=["memories"])
async def key_history(key: MemoryKey, scope: RequestScope, client: Client) -> MemoryHistory:
    """Return every version of the memory a key names, oldest first."""
    versions = await client.memory_history(scope, key=key)
    return MemoryHistory(memory_id=memory_id_for_key(scope, key), versions=versions)


@router.get("/browse", tags=["browser"])
async def browse(
    scope: RequestScope,
    client: Client,
    limit: Annotated[int, Query(ge=1, le=MAX_BROWSED)] = 100,
) -> UserMemory:
    """Return everything memoryd holds of the user, tier by tier (what the browser shows).

    Short-term pages, mid-term segments with their heat, the persona, explicit memories and
    the knowledge graph (relations with ``valid_at`` and ``invalid_at``); ``limit`` bounds
    each list.
    """
    return await client.browse(scope, limit=limit)


# --- the memory browser: one static page over /v1/browse and /v1/recall ----------------------
@functools.cache
def browser_page() -> tuple[str, str]:
    """Return the memory browser's HTML and the Content-Security-Policy that serves it.

    The policy runs only the page's own script (by its hash), talks only to this server, and
    forbids framing: what the page shows of memories can never run as code.
    """
    page = resources.files("memoryd.services.http").joinpath("browser.html").read_text()
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = (
        f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return page, policy


# --- notifications as server-sent events -----------------------------------------------------
def event_frame(sequence: int | None, note: MemoryUpdated) -> str:
    """Return one notification as a server-sent event; its id resumes the stream after it."""
    return f"id: {sequence}\nevent: {note.kind}\ndata: {note.model_dump_json()}\n\n"


def stream_start(last_event_id: str | None, start: Literal["all"] | None) -> Start:
    """Return where a stream starts: after ``Last-Event-ID``, at the start, or from now."""
    if last_event_id is not None:
        if not last_event_id.isdigit():
            raise ApiError("invalid_request", "Last-Event-ID: expected an event id (a number)")
        return int(last_event_id) + 1
    return start or datetime.now(UTC)


async def disconnected(receive: Receive) -> None:
    """Return once the client has gone (Starlette does not watch for it while streaming)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def event_stream(
    client: MemoryClient, receive: Receive, tenant: str, user_id: str | None, start: Start
) -> AsyncIterator[str]:
    """Yield the notifications from ``start`` as events, a comment when idle; end when the
    client goes (at once, not at the next write)."""
    yield ": subscribed\n\n"
    gone = asyncio.ensure_future(disconnected(receive))
    try:
        async with client.notifications(tenant, user_id, start=start) as updates:
            pending: asyncio.Future[MemoryUpdated] | None = None
            try:
                while not gone.done():
                    # The next one is awaited across pings, never cancelled half-fetched.
                    pending = pending or asyncio.ensure_future(updates.get())
                    watched: set[asyncio.Future[Any]] = {pending, gone}
                    done, _ = await asyncio.wait(
                        watched, timeout=PING_SECONDS, return_when=asyncio.FIRST_COMPLETED
                    )
                    if pending in done:
                        note, pending = pending.result(), None
                        yield event_frame(updates.sequence, note)
                    elif not done:
                        yield ": ping\n\n"
            finally:
                # Settle the fetch in flight before the subscription is taken down.
                if pending is not None:
                    pending.cancel()
                    await asyncio.wait({pending})
    finally:
        gone.cancel()
        log.info("http_stream_closed", tenant=tenant, user=user_id)


@router.get(
    "/notifications",
    tags=["notifications"],
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": SSE_DESCRIPTION}},
)
async def notifications(
    *,
    request: Request,
    grant: Caller,
    client: Client,
    tenant: ScopeField = None,
    user_id: ScopeField = None,
    start: Literal["all"] | None = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """Stream the memory-updated notifications of the user (or, tenant-wide, every user).

    Each event's ``id`` is its notification stream sequence: reconnect with ``Last-Event-ID``
    to resume after it. Without it, the stream starts now (``start=all``: at the oldest kept).
    """
    _bound(grant, "tenant", tenant)
    user = _bound(grant, "user_id", user_id)
    start_at = stream_start(last_event_id, start)
    stream = event_stream(client, request.receive, grant.tenant, user, start_at)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


# --- the app ---------------------------------------------------------------------------------
async def close_within(client: MemoryClient, seconds: float) -> None:
    """Close the client, giving up after ``seconds``: nothing is left to flush.

    Every write was acknowledged by the log before its response was sent, so a drain that
    hangs (seen after event streams were read: a pull subscription's fetch left behind) must
    not hold the process past its shutdown.
    """
    try:
        async with asyncio.timeout(seconds):
            await client.close()
    except TimeoutError:
        log.warning("http_client_close_timed_out", seconds=seconds)


def create_app(settings: Settings, grants: Mapping[str, Grant]) -> FastAPI:
    """Return the HTTP API over a ``MemoryClient`` its lifespan connects with ``settings``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.client = client = await MemoryClient.from_settings(settings)
        try:
            yield
        finally:
            await close_within(client, CLOSE_SECONDS)

    app = FastAPI(
        title="memoryd",
        version=version("memoryd"),
        description="Long-term memory for LLM agents: remember, recall within a token budget, "
        "forget, record turns, list and audit memories, follow notifications.",
        lifespan=lifespan,
    )
    app.state.grants = grants
    install_error_handlers(app)
    app.include_router(router)

    @app.get("/browser", response_class=HTMLResponse, tags=["browser"])
    async def browser() -> HTMLResponse:
        """Serve the memory browser (no token needed to load it; paste one to browse)."""
        page, policy = browser_page()
        return HTMLResponse(page, headers={"Content-Security-Policy": policy})

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Say the API is up (no token needed)."""
        return {"status": "ok"}

    return app


def render_openapi() -> str:
    """Return the API's OpenAPI document as ``schemas/http/openapi.json`` holds it."""
    document = create_app(Settings(), {}).openapi()
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def token_grants(settings: Settings) -> dict[str, Grant]:
    """Return the token map the API serves, from the settings' file; refuse to start without."""
    path = settings.http_tokens_file
    if path is None:
        raise StartupError(
            "memoryd http maps each caller's bearer token to a tenant (and user): set "
            "MEMORYD_HTTP_TOKENS_FILE to a JSON file of tokens to scopes"
        )
    try:
        return load_tokens(path, Grant.model_validate)
    except (OSError, ValueError) as error:
        raise StartupError(f"MEMORYD_HTTP_TOKENS_FILE ({path}): {error}") from None


async def serve(settings: Settings, host: str, port: int) -> None:
    """Serve the API at ``http://host:port/v1`` until SIGINT or SIGTERM."""
    app = create_app(settings, token_grants(settings))
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=3
    )
    log.info("http_serving", url=f"http://{host}:{port}{API_PREFIX}")
    await uvicorn.Server(config).serve()
