"""`memoryd erase`: a user's memory leaves every read model, the index, the graph, the log, the
dead letters, the notifications and the embedding cache; another user's stays as it was."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from memoryd.services.bootstrap import Stack, open_embedding_store
from memoryd.services.mtm.projection import page_text
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import read_dead_letters
from memoryd.shared.adapters.embeddings.cache import content_hash
from memoryd.shared.adapters.index import ScopeFilter
from memoryd.shared.adapters.nats_log import last_sequence, read_subjects
from memoryd.shared.adapters.sql.tables import metadata
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import (
    MemoryRemembered,
    Scope,
    SearchScope,
    TurnRecorded,
    UserErased,
)
from memoryd.shared.contracts.catalog import AnyEvent, decode_valid
from memoryd.shared.domain.items import memory_text, turn_text
from memoryd.shared.domain.memories import memory_identity
from tests.conftest import StackFactory, unique

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MARK = "quillon"  # in every text of alice's, and in nobody else's
ALICE_TURNS = [
    ("I moved to Quillonia last month", "Nice, Quillonia is lovely!"),
    ("My sister Zora Quillon works at Globex", "Good to know about Zora Quillon."),
    ("ok thanks, Quillon here", "You are welcome."),
]
BOB_TURNS = [("I moved to Porto last year", "Porto is great."), ("ok thanks", "You are welcome.")]


def cli(stack: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``memoryd`` as typed, against the stack's NATS and database."""
    environment = {
        **os.environ,
        "MEMORYD_NATS_URL": stack.nats_url,
        "MEMORYD_DATABASE_URL": stack.settings.resolved_database_url(),
        "MEMORYD_DATA_DIR": str(stack.settings.data_dir),
        "MEMORYD_LOG_FORMAT": "console",
        "COLUMNS": "200",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def memoryd(stack: Stack, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the command in a thread: the stack it talks to runs on this test's event loop."""
    return await asyncio.to_thread(cli, stack, *args, **env)


async def play(client: MemoryClient, scope: Scope, turns: list[tuple[str, str]]) -> None:
    for i, (query, response) in enumerate(turns):
        await client.record_turn(scope, query, response, occurred_at=T0 + timedelta(minutes=i))


async def park_junk(stack: Stack, scope: Scope, text: str) -> None:
    """Publish a turn no worker can decode on the user's subject: every worker parks it."""
    subject = subjects.event_subject(scope, "turn.recorded.v1")
    junk = f'{{"type": "turn.recorded.v1", "query": "{text}"}}'.encode()
    await stack.js.publish(subject, junk, headers={"Nats-Msg-Id": str(uuid.uuid4())})


async def user_events(stack: Stack, scope: Scope) -> list[AnyEvent]:
    """Return the events the log holds on the user's subjects (what decodes)."""
    filters = [subjects.user_events_filter(scope.tenant, scope.user_id)]
    return decode_valid(await read_subjects(stack.js, stack.settings.stream_name, filters))


def embedded(events: Iterable[AnyEvent]) -> set[str]:
    """Return texts of these events that the pipeline certainly embedded."""
    texts: set[str] = set()
    for event in events:
        if isinstance(event, TurnRecorded):
            texts.add(turn_text(event))
            texts.add(page_text(event.query, event.response))
        elif isinstance(event, MemoryRemembered):
            texts.add(memory_text(event))
    return texts


async def all_rows(stack: Stack) -> dict[str, list[dict[str, Any]]]:
    """Return every row of every SQL table memoryd keeps (read models and bookkeeping)."""
    out = {}
    async with stack.engine.connect() as conn:
        for table in metadata.sorted_tables:
            out[table.name] = [dict(r._mapping) for r in await conn.execute(select(table))]
    return out


async def cached(stack: Stack, texts: Iterable[str]) -> set[str]:
    """Return the texts among ``texts`` whose vector the SQL embedding cache holds."""
    assert stack.retrieval is not None
    by_hash = {content_hash(text): text for text in texts}
    async with AsyncExitStack() as exit_stack:
        store = await open_embedding_store(stack.engine, exit_stack)
        found = await store.get_many(stack.retrieval.embedder.model_name, list(by_hash))
    return {by_hash[key] for key in found}


def owned_by(rows: dict[str, list[dict[str, Any]]], scope: Scope) -> dict[str, list[Any]]:
    """Return, per table, the rows that name the user as their owner."""
    owner = (scope.tenant, scope.user_id)
    return {
        name: [row for row in found if (row.get("tenant"), row.get("user_id")) == owner]
        for name, found in rows.items()
    }


def traces(rows: dict[str, list[dict[str, Any]]], ids: set[uuid.UUID]) -> list[str]:
    """Return where a row holds the user's text (the mark) or one of their ids."""
    found = []
    for name, table_rows in rows.items():
        for row in table_rows:
            for column, value in row.items():
                if (isinstance(value, uuid.UUID) and value in ids) or MARK in str(value).lower():
                    found.append(f"{name}.{column}: {str(value)[:60]!r}")
    return found


async def index_points(stack: Stack) -> list[Any]:
    """Return every point of the search index."""
    assert stack.retrieval is not None
    points, offset = [], None
    while True:
        page, offset = await stack.retrieval.index.scroll(offset)
        points += page
        if offset is None:
            return points


async def notifications_of(stack: Stack, scope: Scope) -> int:
    """Return how many notifications of the user the notification stream holds."""
    info = await stack.js.stream_info(
        stack.settings.notify_stream_name,
        subjects_filter=subjects.notify_filter(scope.tenant, scope.user_id),
    )
    return sum((info.state.subjects or {}).values())


async def dead_letters_of(stack: Stack, scope: Scope) -> int:
    """Return how many dead letters were parked from the user's subjects."""
    prefix = subjects.user_events_filter(scope.tenant, scope.user_id).removesuffix(">")
    letters = await read_dead_letters(stack.js, stack.settings.dead_letter_stream, None)
    return len([letter for letter in letters if letter.original_subject.startswith(prefix)])


@dataclass(frozen=True)
class Held:
    """What memoryd holds of one user: rows, index points, dead letters, notifications."""

    rows: dict[str, list[Any]]
    points: int
    dead_letters: int
    notifications: int


async def held(stack: Stack, scope: Scope) -> Held:
    """Return what memoryd holds of the user now."""
    assert stack.retrieval is not None
    owner = ScopeFilter(tenant=scope.tenant, user_id=scope.user_id)
    return Held(
        owned_by(await all_rows(stack), scope),
        await stack.retrieval.index.count(owner),
        await dead_letters_of(stack, scope),
        await notifications_of(stack, scope),
    )


async def fill(stack: Stack, client: MemoryClient, alice: Scope, bob: Scope) -> None:
    """Give both users turns, a memory and a dead letter; wait until all is applied."""
    await play(client, alice, ALICE_TURNS)
    await client.remember(alice, "Alice's Quillon locker code is 4711", key="locker")
    await play(client, bob, BOB_TURNS)
    await client.remember(bob, "Bob drinks green tea", key="tea")
    await park_junk(stack, alice, "Quillon junk")
    await park_junk(stack, bob, "bob junk")
    await client.wait_until_applied(timeout=120)


async def test_an_erased_user_is_gone_from_everything_and_stays_gone_after_replay(
    make_stack: StackFactory,
) -> None:
    """Nothing of alice is recallable, stored, indexed, logged or cached; bob is untouched."""
    stack = await make_stack(
        changes={"stm_capacity": 1, "mtm_promotion_tau": 0.5, "recall_visit_interval_seconds": 0}
    )
    tenant = unique("t")
    alice, bob = Scope(tenant=tenant, user_id="alice"), Scope(tenant=tenant, user_id="bob")
    wide = SearchScope.USER
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        await fill(stack, client, alice, bob)
        before = await client.recall(alice, "Quillonia Zora locker", search_scope=wide)
        await client.wait_until_applied(timeout=120)  # the visit it recorded is folded
        logged = await user_events(stack, alice)
        ids = {e.event_id for e in logged}
        ids |= {memory_identity(e) for e in logged if isinstance(e, MemoryRemembered)}
        texts = embedded(logged)
        cached_before, rows_before, bob_before = (
            await cached(stack, texts),
            await all_rows(stack),
            await held(stack, bob),
        )

        erased = await memoryd(stack, "erase", "--tenant", tenant, "--user", "alice")
        rows_after, points_after = await all_rows(stack), await index_points(stack)
        cached_after, bob_after = await cached(stack, texts), await held(stack, bob)
        after = await client.recall(alice, "Quillonia Zora locker", search_scope=wide)
        bob_recall = await client.recall(bob, "Porto tea", search_scope=wide)
        again = await memoryd(stack, "erase", "--tenant", tenant, "--user", "alice")
        await client.wait_until_applied(timeout=120)
        bob_live = await held(stack, bob)

    # What was there, and that the command said what it removed.
    assert "Quillon" in before.context and before.memories and before.memoryos.profile
    assert traces(rows_before, ids) and cached_before, "alice's data is there before"
    assert 0 == erased.returncode, erased.stderr
    assert "erased user alice of tenant" in erased.stdout, erased.stdout
    assert "events purged from the log" in erased.stdout and "Traceback" not in erased.stderr
    assert 0 == again.returncode and "erased already" in again.stdout, again.stderr

    # Nothing of alice is recallable; bob still recalls his.
    assert MARK not in after.context.lower()
    assert ([], [], []) == (after.pages, after.memories, after.items)
    assert ([], []) == (after.memoryos.profile, after.memoryos.knowledge)
    assert "Porto" in bob_recall.context and "green tea" in bob_recall.context

    # Nothing of alice is stored (any table, the embedding cache) or indexed; bob's as it was.
    assert [] == traces(rows_after, ids)
    assert {name: [] for name in rows_after} == owned_by(rows_after, alice)
    assert set() == cached_after
    assert [] == [p.id for p in points_after if p.payload.user_id == "alice"]
    assert [] == [p.id for p in points_after if MARK in p.text.lower()]
    assert bob_before == bob_after

    # The log holds one event of alice's: the audit record, without content; no dead letter
    # or notification of hers is left.
    remaining = await user_events(stack, alice)
    assert [UserErased] == [type(e) for e in remaining]
    assert MARK not in remaining[0].model_dump_json().lower()
    alice_after = await held(stack, alice)
    assert (0, 0, 0) == (alice_after.points, alice_after.dead_letters, alice_after.notifications)

    # A replay folds the log into the same state: still nothing of alice, bob as he was.
    await stack.stop_workers()
    await stack.replay()
    report = await stack.verify()
    replayed = await all_rows(stack)
    assert report.equal, report.lines()
    assert [] == traces(replayed, ids)
    assert set() == await cached(stack, texts)
    assert bob_live.rows == owned_by(replayed, bob)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_an_erasure_while_the_workers_are_busy_with_the_user_leaves_nothing_behind(
    make_stack: StackFactory,
) -> None:
    """Erased while its turns are still being applied (derived events may land after the
    erasure): nothing of the user is left, and a fresh fold of the log agrees."""
    stack = await make_stack(changes={"stm_capacity": 1, "mtm_promotion_tau": 0.5})
    alice = Scope(tenant=unique("t"), user_id="alice")
    busy = [(f"I moved to Quillon{i} last month", f"Quillon{i} is nice.") for i in range(40)]
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        await play(client, alice, busy)  # not waited for: the workers are at it
        erased = await memoryd(stack, "erase", "--tenant", alice.tenant, "--user", "alice")
        await client.wait_until_applied(timeout=120)
        rows = await all_rows(stack)
        remaining = await user_events(stack, alice)

    print(erased.stdout)  # says whether the erasure had to be published again
    assert 0 == erased.returncode, erased.stderr
    assert [UserErased] == [type(e) for e in remaining]
    assert {name: [] for name in rows} == owned_by(rows, alice)
    assert [] == traces(rows, set())
    await stack.stop_workers()
    report = await stack.verify()
    assert report.equal, report.lines()


async def test_erasing_nobody_a_bad_name_or_with_a_tenants_credentials_writes_nothing(
    stack: Stack, client: MemoryClient
) -> None:
    """An unknown user, another tenant's user, a malformed id or tenant credentials: refused."""
    tenant, other = unique("t"), unique("t")
    alice = Scope(tenant=tenant, user_id="alice")
    await client.record_turn(alice, "Alice's Quillon secret", "Kept.")
    await client.wait_until_applied(timeout=60)
    held = await last_sequence(stack.js, stack.settings.stream_name)

    unknown = await memoryd(stack, "erase", "--tenant", tenant, "--user", "nobody")
    elsewhere = await memoryd(stack, "erase", "--tenant", other, "--user", "alice")
    malformed = await memoryd(stack, "erase", "--tenant", tenant, "--user", "al.ice")
    as_tenant = await memoryd(
        stack, "erase", "--tenant", tenant, "--user", "alice", MEMORYD_NATS_TENANT=tenant
    )

    assert 1 == unknown.returncode and "has no user nobody" in unknown.stderr
    assert 1 == elsewhere.returncode and f"tenant {other} has no user alice" in elsewhere.stderr
    assert 2 == malformed.returncode and "user_id" in malformed.stderr
    assert 2 == as_tenant.returncode and "service credentials" in as_tenant.stderr
    for refused in (unknown, elsewhere, malformed, as_tenant):
        assert "Traceback" not in refused.stderr
    assert held == await last_sequence(stack.js, stack.settings.stream_name)
    answer = await client.recall(alice, "Quillon secret")
    assert "Quillon" in answer.context
