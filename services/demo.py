"""``memoryd demo``: play a short conversation and print what recall returns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Category, Scope

CONVERSATION = (
    ("Hi! I'm planning a trip to Japan in April.", "Great choice: April is cherry-blossom season."),
    ("I'd like to see Kyoto and Osaka.", "Kyoto for temples, Osaka for food; 3 days each works."),
    ("I'm vegetarian, by the way.", "Noted: I'll suggest shojin ryori and vegetarian ramen."),
    ("What's the best way to get between them?", "The JR Special Rapid takes about 30 minutes."),
    ("Should I get a JR Pass?", "For Kyoto and Osaka only, single tickets are cheaper."),
    ("My budget is about 2000 euros.", "That covers mid-range hotels, food and trains."),
    ("Can you recommend a hotel in Kyoto?", "Look near Gion or Kyoto Station for easy access."),
    ("And what about Osaka?", "Namba is central and close to Dotonbori's food stalls."),
    ("Remind me what I said about food?", "You're vegetarian; I suggested shojin ryori."),
)


async def run_demo(client: MemoryClient, out: list[str] | None = None) -> list[str]:
    """Play the conversation and a few explicit memories; return the printed lines."""
    lines = out if out is not None else []
    scope = Scope(tenant="demo", user_id=f"traveller-{uuid.uuid4().hex[:6]}", session_id="trip")
    start = datetime.now(UTC) - timedelta(minutes=len(CONVERSATION))
    for i, (query, response) in enumerate(CONVERSATION):
        await client.record_turn(scope, query, response, occurred_at=start + timedelta(minutes=i))
    await client.remember(scope, "The user is vegetarian.", key="diet", importance=0.9)
    await client.remember(scope, "Trip budget: about 2000 euros.", key="budget")
    await client.remember(
        scope, "Wants hotel ideas near Gion.", category=Category.CONVERSATION, key="todo"
    )
    await client.wait_until_applied()
    answer = await client.recall(scope, "what food does the user eat on the trip to Japan?")
    lines.append(
        f"Recall for {scope.tenant}/{scope.user_id}: {len(answer.pages)} STM pages "
        f"(FIFO of 7 from {len(CONVERSATION)} turns), {len(answer.memories)} memories, "
        f"{answer.tokens} tokens"
    )
    lines.append(answer.context)
    await client.end_session(scope)
    await client.wait_until_applied()
    after = await client.recall(scope)
    lines.append(
        f"After the session ended, memories left: {[m.content for m in after.memories]} "
        "(the conversation-category one is gone)"
    )
    return lines
