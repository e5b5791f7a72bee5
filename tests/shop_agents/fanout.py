"""An async example agent that looks up several orders concurrently (``asyncio.gather``).

``JITTER(order_id)`` gives the seconds each branch sleeps, in the tool and again in the agent
after the tool returns; it is random by default, so the order in which branches complete
(and record their next steps) varies from run to run, in recording and in replay alike.
``CALLS`` counts how often each tool and model body really ran.
"""

from __future__ import annotations

import asyncio
import collections
import random
from collections.abc import Callable
from typing import Any

import tachograph as tg

MODEL_ID = "triage-2026-10-01"

PRICES = {"A-1": 2500, "B-2": 4000, "C-3": 900, "D-4": 12000}

CALLS: collections.Counter[str] = collections.Counter()


def _random_jitter(order_id: str) -> float:
    return random.uniform(0, 0.02)


JITTER: Callable[[str], float] = _random_jitter


@tg.tool(effect="read")
async def fetch_order(order_id: str) -> dict[str, Any]:
    """Read an order (slowly, by a varying amount)."""
    CALLS["fetch_order"] += 1
    await asyncio.sleep(JITTER(order_id))
    return {"order_id": order_id, "price_cents": PRICES[order_id]}


@tg.tool(effect="pure")
async def score(order: dict[str, Any]) -> dict[str, Any]:
    """A pure scoring of an order."""
    CALLS["score"] += 1
    return {"order_id": order["order_id"], "score": order["price_cents"] // 100}


@tg.model(MODEL_ID, provider="scripted")
async def triage_model(request: dict[str, Any]) -> dict[str, Any]:
    """A scripted model that summarises the routes it is given."""
    CALLS["model"] += 1
    routes = request["messages"][-1]["content"]
    return {"model": MODEL_ID, "text": f"{len(routes)} orders triaged"}


async def _branch(order_id: str) -> dict[str, Any]:
    order = await fetch_order(order_id)
    # The agent's own pace varies too: in replay the tool answers at once, so this is what
    # makes the branches finish in another order than they did when recorded.
    await asyncio.sleep(JITTER(order_id))
    scored = await score(order)
    route = "refund" if scored["score"] < 30 else "review"
    tg.decide(f"route:{order_id}", route, chosen_from=["refund", "review"])
    return {"order_id": order_id, "route": route}


@tg.agent(name="triage", models=[MODEL_ID], tools=[fetch_order, score], code_version="fan-1")
async def triage(task: dict[str, Any]) -> dict[str, Any]:
    """Route every order of the task, concurrently, then summarise."""
    routes = await asyncio.gather(*(_branch(o) for o in task["orders"]))
    answer = await triage_model({"messages": [{"role": "user", "content": routes}]})
    return {"routes": routes, "summary": answer["text"]}


TASK = {"orders": ["A-1", "B-2", "C-3", "D-4"]}
