"""The ``memoryd`` command: up, demo, replay, verify, dead-letters, tenants, cluster, status,
recall, remember, forget, export, import, erase, schemas, mcp, http, tools, bench."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import json
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import structlog
from pydantic import ValidationError
from rich.console import Console

from memoryd.services import erasure, lifecycle, people, tenants
from memoryd.services.bootstrap import ALL_COMPONENTS, Stack, start_stack
from memoryd.services.cluster import cluster_up
from memoryd.services.runtime.heap import collect_less_often, freeze_startup_heap
from memoryd.services.runtime.progress import terminal_progress
from memoryd.shared.adapters.dead_letters import (
    DeadLetterGroup,
    group_dead_letters,
    purge_dead_letters,
    read_dead_letters,
    retry_dead_letters,
)
from memoryd.shared.adapters.embedded_nats import _port_open
from memoryd.shared.adapters.nats_auth import TenantError
from memoryd.shared.adapters.nats_log import NatsAuth, NatsUnavailable, connect
from memoryd.shared.client import MemoryClient
from memoryd.shared.client.tools import FORMATS, tool_schemas
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.schema_export import write_schemas
from memoryd.shared.logging import REDACTOR, configure_logging
from memoryd.shared.settings import Settings, StartupError, public_url

if TYPE_CHECKING:
    from memoryd.services.bench.peers import PeerOptions

log = structlog.get_logger("memoryd")


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def cmd_up(settings: Settings, components: Sequence[str]) -> None:
    """Run the stack until Ctrl-C or SIGTERM, then shut everything down."""
    stack = await start_stack(settings, components)  # type: ignore[arg-type]
    log.info("startup_heap_frozen", objects=freeze_startup_heap())
    collect_less_often()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url_file = _url_file(settings)
    url_file.write_text(public_url(stack.nats_url) + "\n")
    print(f"memoryd is up: NATS at {public_url(stack.nats_url)}; Ctrl-C to stop", flush=True)
    try:
        await _wait_for_signal()
    finally:
        await stack.stop()
        print("memoryd stopped", flush=True)


def _url_file(settings: Settings) -> Path:
    # `memoryd up` writes where its NATS listens, so other commands can say which it is.
    return settings.data_dir / "nats.url"


async def _running_url(settings: Settings) -> str | None:
    if settings.nats_url:
        return settings.nats_url
    if _port_open(settings.embedded_nats_host, settings.embedded_nats_port):
        return settings.embedded_nats_url()
    return None


async def _connect_client(settings: Settings, url: str) -> MemoryClient:
    try:
        return await MemoryClient.from_settings(settings, url)
    except NatsUnavailable:
        if settings.nats_url:
            raise
        host, port = settings.embedded_nats_host, settings.embedded_nats_port
        raise StartupError(
            f"something that is not memoryd's NATS listens on {host}:{port}: stop it, or set "
            "MEMORYD_EMBEDDED_NATS_PORT to a free port (or MEMORYD_NATS_URL to memoryd's NATS)"
        ) from None


def _which_memoryd(settings: Settings, url: str) -> str:
    """Say which running memoryd ``url`` is: the setting that named it, or its data folder."""
    if settings.nats_url:
        return f"the memoryd at {url} (MEMORYD_NATS_URL)"
    folder = settings.data_dir.resolve()
    url_file = _url_file(settings)
    if url_file.is_file() and url_file.read_text().strip() == url:
        return f"the memoryd already running at {url} (data folder {folder})"
    return f"the memoryd already running at {url} (not started from data folder {folder})"


async def cmd_demo(settings: Settings) -> None:
    """Play the demo against a running memoryd, or bring up the embedded stack for it."""
    from memoryd.services.demo import run_demo

    url = await _running_url(settings)
    stack: Stack | None = None
    if url is None:
        stack = await start_stack(settings)
        url = stack.nats_url
    try:
        client = await _connect_client(settings, url)
        if stack is None:
            print(f"memoryd demo: playing into {_which_memoryd(settings, url)}", flush=True)
        async with client:
            for line in await run_demo(client):
                print(line, flush=True)
    finally:
        if stack is not None:
            await stack.stop()


def _refuse_if_running(settings: Settings, why: str) -> None:
    if not settings.nats_url and _port_open(
        settings.embedded_nats_host, settings.embedded_nats_port
    ):
        sys.exit(f"memoryd is running: stop it first ({why})")


async def cmd_replay(settings: Settings) -> None:
    """Drop and rebuild every read model (SQL tables and the search index) from the log.

    A progress bar per projection while it folds; a summary table at the end.
    """
    _refuse_if_running(settings, "replay rebuilds what its workers write")
    stack = await start_stack(settings, components=())  # connections only, no workers
    try:
        with terminal_progress() as progress:
            report = await stack.replay(progress=progress)
    finally:
        await stack.stop()
    Console().print(people.replay_table(report))


async def cmd_verify(settings: Settings) -> bool:
    """Fold the log into scratch storage and compare it with the live read models and index."""
    _refuse_if_running(settings, "verify compares what its workers write")
    stack = await start_stack(settings, components=())  # connections only, no workers
    try:
        report = await stack.verify()
    finally:
        await stack.stop()
    for line in report.lines():
        print(line)
    print(
        "verify: the read models equal the log"
        if report.equal
        else f"verify: {len(report.differences)} read models differ from the log"
    )
    return report.equal


async def cmd_dead_letters(settings: Settings, limit: int, action: str | None) -> None:
    """Print the newest dead letters grouped by original message; or retry or purge them all."""
    url = await _running_url(settings)
    if url is None:
        raise StartupError(
            "memoryd is not running: start it with `memoryd up`, or set MEMORYD_NATS_URL"
        )
    nc = await connect(
        url,
        name="memoryd-cli",
        timeout=settings.connect_timeout_seconds,
        auth=NatsAuth.from_settings(settings),
    )
    js = nc.jetstream()
    dlq = settings.dead_letter_stream
    try:
        letters = await read_dead_letters(js, dlq, None if action else limit)
        groups = group_dead_letters(letters)
        if action == "retry":
            sequences = await retry_dead_letters(js, dlq, settings.stream_name, groups)
            print(f"re-delivered {len(sequences)} messages; removed {len(letters)} dead letters")
        elif action == "purge":
            print(f"deleted {await purge_dead_letters(js, dlq, groups)} dead letters")
        else:
            for group in groups:
                print(_describe_group(group))
    finally:
        await nc.drain()


def _describe_group(group: DeadLetterGroup) -> str:
    lines = [f"original #{group.original_sequence} {group.original_subject}"]
    for reason, consumers in group.reasons.items():
        lines.append(f"    {reason}  [{', '.join(consumers)}]")
    lines.append(f"    {group.data[:200]!r}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memoryd", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run memoryd (embedded NATS unless MEMORYD_NATS_URL is set)")
    up.add_argument(
        "--components",
        default=",".join(ALL_COMPONENTS),
        help="comma-separated subset of: " + ", ".join(ALL_COMPONENTS),
    )
    sub.add_parser("demo", help="play a short conversation and print what recall returns")
    sub.add_parser("replay", help="drop the read models and rebuild them from the log")
    sub.add_parser(
        "verify", help="compare the live read models and index with a fresh fold of the log"
    )
    schemas = sub.add_parser(
        "schemas", help="export the contracts as JSON Schema, and the HTTP API as OpenAPI"
    )
    schemas.add_argument("--out", type=Path, default=Path("schemas"))
    _add_dead_letters(sub)
    _add_tenants(sub)
    _add_people(sub)
    cluster = sub.add_parser(
        "cluster", help="the production topology as processes: 3 NATS nodes, one per component"
    )
    cluster_sub = cluster.add_subparsers(dest="action", required=True)
    cluster_up = cluster_sub.add_parser("up", help="start it; Ctrl-C stops every process")
    cluster_up.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="processes per component (they share the partitions: set MEMORYD_PARTITIONS)",
    )
    cluster_up.add_argument(
        "--dir", type=Path, default=None, help="where it keeps its files (default data_dir/cluster)"
    )
    _add_interfaces(sub)
    _add_bench(sub)
    return parser


def _add_people(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("status", help="each projection's position, lag and dead letters")
    recall = sub.add_parser("recall", help="ask recall a question for a user; print a table")
    recall.add_argument("question")
    recall.add_argument("--limit", type=int, default=10)
    recall.add_argument("--explain", action="store_true", help="show each stream's rank, score")
    remember = sub.add_parser("remember", help="store an explicit memory for a user")
    remember.add_argument("content")
    remember.add_argument("--key", default=None, help="the same key replaces the memory")
    forget = sub.add_parser("forget", help="forget a user's memory by id or by key")
    which = forget.add_mutually_exclusive_group(required=True)
    which.add_argument("--id", type=uuid.UUID, default=None)
    which.add_argument("--key", default=None)
    export = sub.add_parser("export", help="a tenant's (or user's) events and memories as JSONL")
    export.add_argument("--tenant", required=True)
    export.add_argument("--user", default=None)
    export.add_argument("--out", type=Path, default=None, help="a file (default: stdout)")
    load = sub.add_parser("import", help="publish an export's input events the log lacks")
    load.add_argument("file", type=Path)
    erase = sub.add_parser(
        "erase", help="erase a user: read models, index, graph, their events in the log"
    )
    erase.add_argument("--tenant", required=True)
    erase.add_argument("--user", required=True)
    erase.add_argument(
        "--timeout", type=float, default=120.0, help="seconds the workers get to apply it"
    )
    for command in (recall, remember, forget):
        command.add_argument("--tenant", required=True)
        command.add_argument("--user", required=True)
        command.add_argument("--agent", default="default")
        command.add_argument("--session", default=None)


async def _running_client(settings: Settings) -> MemoryClient:
    url = await _running_url(settings)
    if url is None:
        raise StartupError(
            "memoryd is not running: start it with `memoryd up`, or set MEMORYD_NATS_URL"
        )
    return await _connect_client(settings, url)


async def cmd_lifecycle(args: argparse.Namespace, settings: Settings) -> None:
    """Export a tenant's (or user's) memory as JSON lines, or import such a file.

    Progress bars on stderr when it is a terminal; a summary table at the end (on stderr for
    an export to stdout, which carries the records).
    """
    async with await _running_client(settings) as client:
        if args.command == "export":
            with terminal_progress() as progress:
                lines = await lifecycle.export_lines(
                    client, settings.stream_name, args.tenant, args.user, progress
                )
            text = "".join(f"{line}\n" for line in lines)
            if args.out is None:
                sys.stdout.write(text)
            else:
                args.out.write_text(text)
            where = "stdout" if args.out is None else str(args.out)
            summary = lifecycle.export_table(lifecycle.export_summary(lines), where)
            Console(stderr=True).print(summary)
            return
        lines = args.file.read_text().splitlines()
        try:
            with terminal_progress() as progress:
                report = await lifecycle.import_lines(client, settings.stream_name, lines, progress)
        except (ValueError, KeyError) as bad:
            raise StartupError(f"{args.file} is not a memoryd export: {bad}") from None
        print(
            f"imported {report.published} events ({report.present} already in the log, "
            f"{report.passed_over} records derived or read models: not published)"
        )
        Console().print(lifecycle.import_table(report))


async def cmd_erase(args: argparse.Namespace, settings: Settings) -> None:
    """Erase a user through the running memoryd; print what went, or why nothing did."""
    if settings.nats_tenant is not None:
        raise StartupError(
            f"memoryd erase purges the log, which tenant {settings.nats_tenant}'s credentials "
            "may not: run it with the workers' service credentials"
        )
    try:
        scope = people.scope_of(args.tenant, args.user, "default", None)
    except ValidationError as invalid:
        raise StartupError(f"invalid scope: {describe_validation_error(invalid)}") from None
    async with await _running_client(settings) as client:
        try:
            report = await erasure.Erasure(client, settings, timeout=args.timeout).erase(scope)
        except erasure.AlreadyErased as done:
            print(f"memoryd erase: {done}", flush=True)
            return
        except erasure.ErasureRefused as refused:
            print(f"memoryd erase: {refused}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
    Console().print(erasure.erasure_table(report))


async def cmd_people(args: argparse.Namespace, settings: Settings) -> None:
    """Run status, recall, remember or forget against the running memoryd; print the result."""
    console = Console()
    async with await _running_client(settings) as client:
        if args.command == "status":
            found = await people.projection_status(client._js, settings)
            console.print(people.status_table(*found))
            return
        try:
            scope = people.scope_of(args.tenant, args.user, args.agent, args.session)
        except ValidationError as invalid:
            raise StartupError(f"invalid scope: {describe_validation_error(invalid)}") from None
        if args.command == "recall":
            response = await client.recall(
                scope, args.question, limit=args.limit, explain=args.explain, timeout=30
            )
            console.print(people.recall_table(response, args.explain))
        elif args.command == "remember":
            console.print(await people.remember(client, scope, args.content, args.key))
        else:
            console.print(await people.forget(client, scope, args.id, args.key))


def _add_tenants(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tenants = sub.add_parser(
        "tenants", help="per-tenant NATS credentials and the nats-server config that checks them"
    )
    action = tenants.add_subparsers(dest="action", required=True)
    for name, text in (("add", "make a tenant's credentials"), ("revoke", "cut a tenant off")):
        one = action.add_parser(name, help=text)
        one.add_argument("tenant")
        one.add_argument(
            "--nats-pid-file",
            type=Path,
            default=None,
            help="the nats-server to reload (default: the embedded one's, under data_dir/nats)",
        )
    action.add_parser("list", help="list the tenants that have credentials")


async def cmd_cluster_up(settings: Settings, base: Path, replicas: int = 1) -> None:
    """Run the topology as processes until Ctrl-C or SIGTERM."""
    topology = await cluster_up(settings, base, replicas)
    print(f"memoryd cluster is up: NATS at {topology.nats.url}", flush=True)
    for name, process in topology.processes.items():
        components = ",".join(process.components)
        print(f"  {name} ({components}): {topology.metrics_url(name)}/readyz", flush=True)
    try:
        await _wait_for_signal()
    finally:
        await topology.stop()
        print("memoryd cluster stopped", flush=True)


def _cluster(args: argparse.Namespace, settings: Settings) -> None:
    base = args.dir or settings.data_dir / "cluster"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(cmd_cluster_up(settings, base, args.replicas))


def _tenants(args: argparse.Namespace, settings: Settings) -> None:
    try:
        if args.action == "list":
            print(tenants.listing(settings))
        elif args.action == "add":
            print(tenants.add(settings, args.tenant, args.nats_pid_file))
        else:
            print(tenants.revoke(settings, args.tenant, args.nats_pid_file))
    except TenantError as refused:
        _refuse(str(refused))


def _add_interfaces(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser(
        "mcp", help="serve memoryd's tools over MCP (stdio, or streamable HTTP at /mcp)"
    )
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP: the address to listen on")
    mcp.add_argument("--port", type=int, default=8765, help="HTTP: the port to listen on")
    http = sub.add_parser("http", help="serve memoryd's HTTP API at /v1 (OpenAPI at /docs)")
    http.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    http.add_argument("--port", type=int, default=8080, help="the port to listen on")
    tools = sub.add_parser(
        "tools", help="print memoryd's tools as function-calling definitions (JSON)"
    )
    tools.add_argument("--format", choices=FORMATS, required=True)


def _add_dead_letters(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dead = sub.add_parser(
        "dead-letters", help="print the newest dead letters, grouped by original message"
    )
    dead.add_argument("--limit", type=int, default=100, help="dead letters to read")
    fix = dead.add_mutually_exclusive_group()
    fix.add_argument(
        "--retry",
        action="store_const",
        const="retry",
        dest="action",
        help="re-deliver every parked message (after a fix) and remove its dead letters",
    )
    fix.add_argument(
        "--purge",
        action="store_const",
        const="purge",
        dest="action",
        help="delete every dead letter",
    )


def _add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="run a benchmark and write its figures to a file")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    pipeline = bench_sub.add_parser("pipeline", help="log append, STM apply, recall latency")
    pipeline.add_argument("--events", type=int, default=20_000)
    pipeline.add_argument("--recalls", type=int, default=2_000)
    pipeline.add_argument("--concurrency", type=int, default=8)
    pipeline.add_argument("--out", type=Path, default=Path("bench/results"))
    _add_bench_retrieval(bench_sub)
    _add_bench_peers(bench_sub)
    faults = bench_sub.add_parser(
        "faults",
        help="steady ingest into the process topology (a private PostgreSQL from initdb), "
        "one fault at a time: lost, doubled, recovery",
    )
    faults.add_argument("--faults", default="all", help="comma-separated, or all")
    faults.add_argument("--turns", type=int, default=90, help="turns published per fault")
    faults.add_argument("--rate", type=float, default=30.0, help="turns published per second")
    faults.add_argument("--out", type=Path, default=Path("bench/results"))


def _add_bench_retrieval(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    retrieval = sub.add_parser("retrieval", help="LongMemEval-S and LoCoMo recall quality")
    retrieval.add_argument("--data", type=Path, default=Path("../shared/bench"))
    retrieval.add_argument("--out", type=Path, default=Path("bench/results"))
    retrieval.add_argument("--cache", type=Path, default=Path("bench/cache/embeddings.db"))
    retrieval.add_argument("--dataset", choices=["longmemeval", "locomo", "all"], default="all")
    retrieval.add_argument("--subset", type=int, default=None, help="first N questions/convs")
    # The bench asks with the values tuned on the dev data (the service defaults are the
    # design's k = 60 and 3 per session; see the README for both measured).
    retrieval.add_argument("--rrf-k", type=int, default=10)
    retrieval.add_argument("--max-per-session", type=int, default=10)
    retrieval.add_argument(
        "--candidates", type=int, default=None, help="keys per stream (default: the service's)"
    )
    retrieval.add_argument(
        "--first-turn-sessions",
        action="store_true",
        help="rank sessions by their first recalled turn, not by recall's session ranking",
    )
    retrieval.add_argument(
        "--dump", action="store_true", help="also write every question's rankings (JSON lines)"
    )


def _add_bench_peers(bench_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    peers = bench_sub.add_parser(
        "peers", help="memoryd next to mem0 on the same texts: writes/s, search latency, memory"
    )
    peers.add_argument("--n-write", type=int, default=1_000, help="messages for the write rate")
    peers.add_argument("--n-total", type=int, default=5_000, help="messages before searching")
    peers.add_argument("--n-search", type=int, default=200, help="searches, one caller")
    peers.add_argument(
        "--concurrency", type=int, default=0, help="callers of a load phase (0: no load phase)"
    )
    peers.add_argument(
        "--load-seconds", type=float, default=60.0, help="how long the load phase's callers ask"
    )
    peers.add_argument("--only", choices=["memoryd", "mem0"], default=None, help="run one side")
    peers.add_argument("--mem0-threads", type=int, default=1, help="torch threads for mem0")
    peers.add_argument(
        "--users", type=int, default=1, help="spread the messages over this many users, in turn"
    )
    peers.add_argument(
        "--rest-seconds",
        type=float,
        default=0.0,
        help="after the searches, idle this long, then read what each side holds (0: not read)",
    )
    peers.add_argument("--data", type=Path, default=Path("../shared/bench"))
    peers.add_argument(
        "--out", type=Path, default=Path("bench/results/peers"), help="writes OUT.json, OUT.md"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``memoryd`` console command.

    A configuration memoryd cannot start with ends the command with ONE line on stderr naming
    the setting to change, and exit status 2; no traceback.
    """
    args = _parser().parse_args(argv)
    # `kill -USR1 <pid>` writes every thread's stack to stderr: where a process that does not
    # answer is waiting (the topology does it to a process that never gets ready).
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        settings = Settings()
    except ValidationError as invalid:
        _refuse(f"invalid settings: {describe_validation_error(invalid)}")
    configure_logging(settings.log_format, settings.log_level)
    REDACTOR.add(settings.secrets())
    try:
        _run(args, settings)
    except StartupError as refused:
        _refuse(str(refused))


def _refuse(message: str) -> NoReturn:
    print(f"memoryd: {REDACTOR.scrub(' '.join(message.split()))}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _up(args: argparse.Namespace, settings: Settings) -> None:
    components = [c.strip() for c in args.components.split(",") if c.strip()]
    unknown = set(components) - set(ALL_COMPONENTS)
    if unknown:
        sys.exit(f"unknown components: {sorted(unknown)}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(cmd_up(settings, components))


def _verify(_args: argparse.Namespace, settings: Settings) -> None:
    if not asyncio.run(cmd_verify(settings)):
        sys.exit(1)


def _schemas(args: argparse.Namespace, _settings: Settings) -> None:
    for path in write_schemas(args.out):
        print(path)
    try:
        from memoryd.services.http.app import render_openapi
    except ModuleNotFoundError:  # without the http extra there is no API to describe
        return
    openapi = args.out / "http" / "openapi.json"
    openapi.parent.mkdir(parents=True, exist_ok=True)
    openapi.write_text(render_openapi())
    print(openapi)


def _mcp(args: argparse.Namespace, settings: Settings) -> None:
    try:
        from memoryd.services.mcp import server
    except ModuleNotFoundError as missing:
        raise StartupError(
            f"memoryd mcp needs the mcp package ({missing.name} is missing): "
            "pip install 'memoryd[mcp]'"
        ) from None
    with contextlib.suppress(KeyboardInterrupt):
        if args.transport == "stdio":
            asyncio.run(server.serve_stdio(settings))
        else:
            asyncio.run(server.serve_http(settings, args.host, args.port))


def _http(args: argparse.Namespace, settings: Settings) -> None:
    try:
        from memoryd.services.http import app
    except ModuleNotFoundError as missing:
        raise StartupError(
            f"memoryd http needs FastAPI and uvicorn ({missing.name} is missing): "
            "pip install 'memoryd[http]'"
        ) from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(app.serve(settings, args.host, args.port))


def _tools(args: argparse.Namespace, _settings: Settings) -> None:
    print(json.dumps(tool_schemas(args.format), indent=2))


def _bench_pipeline(args: argparse.Namespace, settings: Settings) -> None:
    from memoryd.services.bench.pipeline import run_pipeline_bench
    from memoryd.services.bench.report import figures_table

    with terminal_progress() as progress:
        figures = asyncio.run(
            run_pipeline_bench(
                settings, args.events, args.recalls, args.concurrency, args.out, progress=progress
            )
        )
    Console().print(figures_table("memoryd bench pipeline", figures))


def _bench_faults(args: argparse.Namespace, settings: Settings) -> None:
    from memoryd.services.bench.faults import FAULTS, render, run_faults_bench

    chosen = FAULTS if args.faults == "all" else tuple(args.faults.split(","))
    unknown = set(chosen) - set(FAULTS)
    if unknown:
        _refuse(f"unknown faults {sorted(unknown)}: choose from {', '.join(FAULTS)}")
    rows = asyncio.run(run_faults_bench(settings, chosen, args.turns, args.rate, args.out))
    print(render(rows), end="")


def _bench_retrieval(args: argparse.Namespace, settings: Settings) -> None:
    from memoryd.services.bench.retrieval import BenchOptions, run_retrieval_bench

    options = BenchOptions(
        data_dir=args.data,
        out=args.out,
        cache=args.cache,
        datasets=("longmemeval", "locomo") if args.dataset == "all" else (args.dataset,),
        subset=args.subset,
        rrf_k=args.rrf_k,
        max_per_session=args.max_per_session,
        session_ranking=not args.first_turn_sessions,
        candidates=args.candidates,
        dump=args.dump,
    )
    from memoryd.services.bench.report import summary_table

    with terminal_progress() as progress:
        reports = asyncio.run(run_retrieval_bench(settings, options, progress=progress))
    for report in reports:
        Console().print(summary_table(report))
    print(f"reports (every group, the notes) in {args.out}")


def _bench_peers(args: argparse.Namespace, _settings: Settings) -> None:
    # Each side starts its own memory system with that system's defaults: no settings here.
    from memoryd.services.bench.peers import run_peers_bench

    run_peers_bench(_peer_options(args))


def _peer_options(args: argparse.Namespace) -> PeerOptions:
    from memoryd.services.bench.peers import PeerOptions

    try:
        return PeerOptions(
            data=args.data,
            out=args.out,
            n_write=args.n_write,
            n_total=args.n_total,
            n_search=args.n_search,
            concurrency=args.concurrency,
            load_seconds=args.load_seconds,
            only=args.only,
            mem0_threads=args.mem0_threads,
            users=args.users,
            rest_seconds=args.rest_seconds,
        )
    except ValidationError as invalid:
        raise StartupError(f"invalid options: {describe_validation_error(invalid)}") from None


Command = Callable[[argparse.Namespace, Settings], None]
COMMANDS: dict[str, Command] = {
    "up": _up,
    "demo": lambda _args, settings: asyncio.run(cmd_demo(settings)),
    "replay": lambda _args, settings: asyncio.run(cmd_replay(settings)),
    "verify": _verify,
    "schemas": _schemas,
    "mcp": _mcp,
    "http": _http,
    "tools": _tools,
    "tenants": _tenants,
    "status": lambda args, settings: asyncio.run(cmd_people(args, settings)),
    "recall": lambda args, settings: asyncio.run(cmd_people(args, settings)),
    "remember": lambda args, settings: asyncio.run(cmd_people(args, settings)),
    "forget": lambda args, settings: asyncio.run(cmd_people(args, settings)),
    "export": lambda args, settings: asyncio.run(cmd_lifecycle(args, settings)),
    "import": lambda args, settings: asyncio.run(cmd_lifecycle(args, settings)),
    "erase": lambda args, settings: asyncio.run(cmd_erase(args, settings)),
    "cluster": _cluster,
    "dead-letters": lambda args, settings: asyncio.run(
        cmd_dead_letters(settings, args.limit, args.action)
    ),
    "bench pipeline": _bench_pipeline,
    "bench retrieval": _bench_retrieval,
    "bench peers": _bench_peers,
    "bench faults": _bench_faults,
}


def _run(args: argparse.Namespace, settings: Settings) -> None:
    name = f"bench {args.bench}" if args.command == "bench" else args.command
    COMMANDS[name](args, settings)


if __name__ == "__main__":
    main()
