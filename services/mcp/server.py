"""`memoryd mcp`: memoryd's tools over the Model Context Protocol, on stdio or streamable HTTP.

A thin adapter: the tools, their schemas and what they do are ``shared.client.tools``; this
module lists them, binds each call to a scope and turns results and refusals into MCP
results. The scope never comes from a tool's arguments: on stdio it is the one the settings
name (``MEMORYD_MCP_TENANT``, ``_USER``, ``_AGENT``, ``_SESSION``), on HTTP the one the
caller's bearer token maps to (``MEMORYD_MCP_TOKENS_FILE``). The server talks to memoryd only
through the SDK over NATS, so it needs no database credentials.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import mcp_types as types
import structlog
import uvicorn
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from nats.errors import NoRespondersError
from pydantic import ValidationError
from starlette.requests import Request

from memoryd.services.mcp.tokens import SCOPE_KEY, BearerScopes, load_token_map
from memoryd.shared.adapters.nats_log import PublishFailed
from memoryd.shared.client import ListMemoriesFailed, MemoryClient, RecallFailed
from memoryd.shared.client.tools import TOOLS, Tool, ToolCallError, execute_tool_call, input_schema
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.settings import Settings, StartupError

log = structlog.get_logger(__name__)

INSTRUCTIONS = (
    "memoryd is this user's long-term memory. Call recall before answering anything that may "
    "depend on what the user told you before; remember lasting facts as you learn them (with "
    "a key when they may change); record_turn after each exchange. The user and tenant are "
    "fixed by the server: no tool takes them."
)
# Failures of memoryd itself (not of the call): reported to the caller as a tool error. No
# responders: no recall service runs (`memoryd up --components` without recall).
SERVICE_FAILURES = (
    RecallFailed,
    ListMemoriesFailed,
    PublishFailed,
    TimeoutError,
    NoRespondersError,
)

ScopeOf = Callable[[ServerRequestContext[Any, Any]], Scope]


def mcp_tool(tool: Tool[Any]) -> types.Tool:
    """Return a tool as MCP lists it: the shared description and input schema, and hints."""
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=input_schema(tool),
        annotations=types.ToolAnnotations(
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            open_world_hint=False,
        ),
    )


def _result(payload: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=payload
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )


async def call_tool(
    client: MemoryClient, scope: Scope, name: str, arguments: dict[str, Any] | None
) -> types.CallToolResult:
    """Run one tool call in ``scope``; bad input and memoryd's failures are tool errors."""
    try:
        return _result(await execute_tool_call(client, scope, name, arguments))
    except ToolCallError as refused:
        log.info("mcp_tool_refused", tool=name, tenant=scope.tenant, reason=str(refused))
        return _error(str(refused))
    except SERVICE_FAILURES as failed:
        log.warning("mcp_tool_failed", tool=name, tenant=scope.tenant, error=repr(failed))
        return _error(f"memoryd could not do {name}: {failed}; try again later")


def build_server(client: MemoryClient, scope_of: ScopeOf) -> Server[Any]:
    """Return the MCP server of memoryd's tools over ``client``; ``scope_of`` binds each call."""
    tools = types.ListToolsResult(tools=[mcp_tool(tool) for tool in TOOLS.values()])

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return tools

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await call_tool(client, scope_of(ctx), params.name, params.arguments)

    return Server(
        "memoryd",
        version=version("memoryd"),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )


def configured_scope(settings: Settings) -> Scope:
    """Return the scope stdio serves, from the settings; refuse to start without one."""
    if not (settings.mcp_tenant and settings.mcp_user):
        raise StartupError(
            "memoryd mcp --transport stdio serves one user: set MEMORYD_MCP_TENANT and "
            "MEMORYD_MCP_USER (and MEMORYD_MCP_AGENT)"
        )
    try:
        return Scope(
            tenant=settings.mcp_tenant,
            user_id=settings.mcp_user,
            agent_id=settings.mcp_agent,
            session_id=settings.mcp_session,
        )
    except ValidationError as invalid:
        raise StartupError(
            f"invalid MEMORYD_MCP_* scope: {describe_validation_error(invalid)}"
        ) from None


def token_scopes(settings: Settings) -> dict[str, Scope]:
    """Return the token map HTTP serves, from the settings' file; refuse to start without one."""
    path = settings.mcp_tokens_file
    if path is None:
        raise StartupError(
            "memoryd mcp --transport http maps each caller's bearer token to a scope: set "
            "MEMORYD_MCP_TOKENS_FILE to a JSON file of tokens to scopes"
        )
    try:
        return load_token_map(path)
    except (OSError, ValueError) as error:
        raise StartupError(f"MEMORYD_MCP_TOKENS_FILE ({path}): {error}") from None


def http_scope(ctx: ServerRequestContext[Any, Any]) -> Scope:
    """Return the scope the HTTP request's bearer token bound (``BearerScopes`` put it there)."""
    request = ctx.request
    bound = request.scope.get(SCOPE_KEY) if isinstance(request, Request) else None
    if not isinstance(bound, Scope):
        raise PermissionError("no scope bound to this request")
    return bound


async def serve_stdio(settings: Settings) -> None:
    """Serve the tools on stdin/stdout in the configured scope until the client leaves."""
    scope = configured_scope(settings)
    async with await MemoryClient.from_settings(settings) as client:
        server = build_server(client, lambda _ctx: scope)
        log.info("mcp_serving", transport="stdio", tenant=scope.tenant, user=scope.user_id)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def serve_http(settings: Settings, host: str, port: int) -> None:
    """Serve the tools over streamable HTTP at ``/mcp``, one scope per bearer token."""
    scopes = token_scopes(settings)
    async with await MemoryClient.from_settings(settings) as client:
        server = build_server(client, http_scope)
        app = BearerScopes(server.streamable_http_app(host=host), scopes)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        log.info("mcp_serving", transport="http", url=f"http://{host}:{port}/mcp")
        await uvicorn.Server(config).serve()
