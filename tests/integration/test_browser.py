"""The memory browser in a real browser: headless Chromium (Debian's, driven by its
chromedriver through selenium) against `memoryd http` as a uvicorn process over a live stack.

It shows one user's pages, segments with heat, persona, memories, graph (an ended relation
struck through) and recall's explain scores; a screenshot is written as the test's artifact.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memoryd.services.bootstrap import Stack
from memoryd.services.runtime.tokens import Grant
from memoryd.shared import subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope
from tests.conftest import StackFactory, unique
from tests.integration.test_http import api, http_api, ok

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no chromium and chromedriver here: apt-get install chromium chromium-driver",
)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,2600",
)
ALICE_TOKEN = "browser-alice-0123456789"
OTHER_TOKEN = "browser-other-tenant-0123456789"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
TURNS = [
    ("I live in Lisbon", "Lisbon is lovely."),
    ("I moved to Porto last month", "Porto, great!"),
    ("My sister Zora works at Globex", "Good to know."),
    ("ok thanks", "You are welcome."),
]


@dataclass(frozen=True)
class Seen:
    """What the page showed, section by section, and where its screenshot is."""

    status: str
    sections: dict[str, str]
    ended_relations: list[str]
    recall: str
    refused: str
    screenshot: Path


def drive(url: str, user_data: Path, screenshot: Path) -> Seen:
    """Open the browser page, load alice's memory, ask recall, try another user; read it all."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={user_data}"):
        options.add_argument(flag)
    # Both paths given: selenium never looks for (or downloads) a driver or a browser.
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(f"{url}/browser")
        driver.find_element(By.ID, "token").send_keys(ALICE_TOKEN)
        driver.find_element(By.ID, "load").click()
        wait.until(lambda d: "user alice" in d.find_element(By.ID, "status").text)
        status = driver.find_element(By.ID, "status").text
        for details in driver.find_elements(By.CSS_SELECTOR, "#segments details"):
            details.click()  # open each segment's pages
        names = ("pages", "segments", "persona", "memories", "graph")
        sections = {name: driver.find_element(By.ID, name).text for name in names}
        ended = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#graph tr.ended")]
        driver.find_element(By.ID, "recall-query").send_keys("where does alice live now?")
        driver.find_element(By.ID, "recall-run").click()
        wait.until(lambda d: "bm25" in d.find_element(By.ID, "recall-results").text)
        recall = driver.find_element(By.ID, "recall-results").text
        driver.save_screenshot(str(screenshot))
        user = driver.find_element(By.ID, "user")
        user.send_keys("bob")  # alice's token names alice: another user is refused
        driver.find_element(By.ID, "load").click()
        wait.until(lambda d: "forbidden" in d.find_element(By.ID, "status").text)
        refused = driver.find_element(By.ID, "status").text
    finally:
        driver.quit()
    return Seen(status, sections, ended, recall, refused, screenshot)


async def play(client: MemoryClient, scope: Scope) -> None:
    for day, (query, response) in enumerate(TURNS):
        at = T0 + timedelta(days=day)
        await client.record_turn(scope, query, response, occurred_at=at)
    await client.remember(scope, "Alice's locker code is 4711", key="locker")
    await client.wait_until_applied(timeout=120)


@needs_chromium
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_browser_shows_every_tier_of_a_user_and_recalls_with_scores(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    """Pages, segments with heat, persona, memories, graph with validity, recall's streams;
    another user is refused on the page, another tenant's token sees nothing of alice."""
    stack = await make_stack(changes={"stm_capacity": 1, "mtm_promotion_tau": 0.5})
    tenant = unique("t")
    alice = Scope(tenant=tenant, user_id="alice", agent_id="bot")
    grants = {
        ALICE_TOKEN: Grant(tenant=tenant, user_id="alice", agent_id="bot"),
        OTHER_TOKEN: Grant(tenant=unique("t")),
    }
    async with await MemoryClient.connect(stack.nats_url, stack.settings.stream_name) as client:
        await play(client, alice)
    screenshot = tmp_path / "memory-browser.png"
    with http_api(stack, grants, tmp_path) as url:
        seen = await asyncio.to_thread(drive, url, tmp_path / "chromium", screenshot)
        async with api(url, OTHER_TOKEN) as other:
            theirs = ok(await other.get("/v1/browse", params={"user_id": "alice"}))
            crossing = await other.get("/v1/browse", params={"tenant": tenant, "user_id": "alice"})
    print(f"memory browser screenshot: {screenshot}")

    assert f"user alice of tenant {tenant}" in seen.status
    assert "ok thanks" in seen.sections["pages"]  # the one page STM keeps
    assert "heat" in seen.sections["segments"] and "I moved to Porto" in seen.sections["segments"]
    assert "location" in seen.sections["persona"] and "Porto" in seen.sections["persona"]
    assert "Alice's locker code is 4711" in seen.sections["memories"]
    assert "Zora" in seen.sections["graph"] and "has_sister" in seen.sections["graph"]
    assert [] != [row for row in seen.ended_relations if "lives_in" in row and "Lisbon" in row]
    assert "still valid" in seen.sections["graph"]  # Porto
    assert "bm25" in seen.recall and "dense" in seen.recall and "Porto" in seen.recall
    assert "forbidden" in seen.refused
    assert screenshot.stat().st_size > 10_000
    assert ([], [], 0) == (theirs["pages"], theirs["segments"], theirs["memory_count"])
    assert (403, "forbidden") == (crossing.status_code, crossing.json()["code"])
    assert "4711" not in json.dumps(theirs) + crossing.text


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_browse_over_nats_refuses_bad_input_and_another_tenants_scope(
    stack: Stack, client: MemoryClient
) -> None:
    """Malformed JSON or a limit past the bound is invalid_request; a scope naming a tenant
    other than its subject's is forbidden, with nothing of the user in it; the SDK reads the
    user's own view."""
    tenant, other = unique("t"), unique("t")
    alice = Scope(tenant=tenant, user_id="alice")
    await client.remember(alice, "Alice's locker code is 4711", key="locker")
    await client.wait_until_applied(timeout=60)

    async def ask(subject_tenant: str, body: bytes) -> Any:
        reply = await client._nc.request(subjects.browse_subject(subject_tenant), body, timeout=10)
        return json.loads(reply.data)

    request = {"scope": {"tenant": tenant, "user_id": "alice"}}
    malformed = await ask(tenant, b"{not json")
    crossing = await ask(other, json.dumps(request).encode())
    too_many = await ask(tenant, json.dumps({**request, "limit": 100_000}).encode())
    own = await client.browse(alice)

    assert ("invalid_request", False) == (malformed["code"], malformed["ok"])
    assert "forbidden" == crossing["code"] and "4711" not in json.dumps(crossing)
    assert "invalid_request" == too_many["code"] and too_many["message"].startswith("limit")
    assert ["Alice's locker code is 4711"] == [m.content for m in own.memories]
