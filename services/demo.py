"""``memoryd demo``: play a short conversation and print what recall returns."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Category, RecallResponse, Scope

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
    await _play_trip(client, scope)
    await client.wait_until_applied()
    answer = await client.recall(scope, "what food does the user eat on the trip to Japan?")
    lines += [recall_line(scope, answer), answer.context]
    await client.end_session(scope)
    await client.wait_until_applied()
    after = await client.recall(scope)
    lines.append(
        f"After the session ended, memories left: {[m.content for m in after.memories]} "
        "(the conversation-category one is gone)"
    )
    await run_tiers_demo(client, lines)
    return lines


async def _play_trip(client: MemoryClient, scope: Scope) -> None:
    """Record the conversation, a turn a minute up to now, and three explicit memories."""
    start = datetime.now(UTC) - timedelta(minutes=len(CONVERSATION))
    for i, (query, response) in enumerate(CONVERSATION):
        await client.record_turn(scope, query, response, occurred_at=start + timedelta(minutes=i))
    await client.remember(scope, "The user is vegetarian.", key="diet", importance=0.9)
    await client.remember(scope, "Trip budget: about 2000 euros.", key="budget")
    await client.remember(
        scope, "Wants hotel ideas near Gion.", category=Category.CONVERSATION, key="todo"
    )


def recall_line(scope: Scope, answer: RecallResponse) -> str:
    """Describe what a recall of the trip returned."""
    return (
        f"Recall for {scope.tenant}/{scope.user_id}: {len(answer.pages)} STM pages "
        f"(FIFO of 7 from {len(CONVERSATION)} turns), {len(answer.memories)} memories, "
        f"{answer.tokens} tokens"
    )


# The MemoryOS tiers filling as a longer conversation plays.
LONG_CONVERSATION = (
    ("I moved to Lisbon last month.", "Welcome to Lisbon! How are you settling in?"),
    ("I work as a nurse at the city hospital.", "Night shifts must be tiring; take care."),
    ("Please keep your answers short.", "Sure, I will be brief."),
    ("My favourite food is ramen.", "Lisbon has a few good ramen bars."),
    ("Where can I eat ramen in Lisbon?", "Try the ramen bars in Principe Real."),
    ("Is the ramen in Principe Real vegetarian?", "Some ramen bars there serve vegan broth."),
    ("Which ramen broth is the lightest?", "Shio ramen broth is the lightest."),
    ("Can I make ramen broth at home?", "Yes: simmer kombu and shiitake for a ramen broth."),
    ("How long do ramen noodles cook?", "Fresh ramen noodles cook in about two minutes."),
    ("What goes on top of ramen?", "Ramen toppings: egg, nori, scallions, bamboo."),
    ("I love hiking in the mountains.", "Sintra has lovely hiking trails near Lisbon."),
    ("How long is the Sintra hiking trail?", "The main Sintra hiking loop is about 10 km."),
    ("Is ramen good after hiking?", "A warm ramen bowl is great after a long hike."),
    ("What is a good ramen for winter?", "Miso ramen is rich and warming in winter."),
    ("Thanks, that is all for today.", "Enjoy Lisbon and your ramen!"),
)


def tier_line(turns: int, answer: RecallResponse) -> str:
    """Describe the three tiers as recall sees them after ``turns`` turns."""
    tiers = answer.memoryos
    top = tiers.segments[0] if tiers.segments else None
    profile = {item.attribute: item.value for item in tiers.profile}
    return (
        f"after {turns:>2} turns | STM {len(answer.pages)} pages | MTM {len(tiers.segments)} "
        f"segments used"
        + (f" (top: heat {top.heat:.2f}, keywords {list(top.keywords[:4])})" if top else "")
        + f" | LPM profile {profile}, {len(tiers.knowledge)} facts, {len(tiers.traits)} traits"
    )


async def run_tiers_demo(client: MemoryClient, out: list[str] | None = None) -> list[str]:
    """Play a longer conversation, recalling as it goes; return lines showing each tier fill."""
    lines = out if out is not None else []
    scope = Scope(tenant="demo", user_id=f"lisboeta-{uuid.uuid4().hex[:6]}", session_id="chat")
    start = datetime.now(UTC) - timedelta(minutes=len(LONG_CONVERSATION))
    kinds: dict[str, int] = {}
    async with client.notifications(scope.tenant, scope.user_id) as queue:
        for i, (query, response) in enumerate(LONG_CONVERSATION, 1):
            at = start + timedelta(minutes=i)
            await client.record_turn(scope, query, response, occurred_at=at)
            if i % 3 == 0:
                await client.wait_until_applied()
                answer = await client.recall(scope, "what ramen does the user like?")
                lines.append(tier_line(i, answer))
        await client.wait_until_applied()
        while queue.held():
            note = await queue.get()
            kinds[note.kind] = kinds.get(note.kind, 0) + 1
    answer = await client.recall(scope, "where does the user live?")
    lines.append(f"notifications seen: {dict(sorted(kinds.items()))}")
    lines.append("Recall for 'where does the user live?':")
    lines.append(answer.context)
    return lines
