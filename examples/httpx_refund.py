"""A refund agent on a plain ``httpx`` client, recorded by tachograph with one line.

The agent reads an order from a shop API (``GET``: an ``external.read``) and refunds it
(``POST``: a ``write`` tool, never sent again in replay). ``agent`` is the declared tachograph
agent that ``tacho test corpus/httpx --agent examples.httpx_refund:agent`` replays; the shop
at ``SHOP_URL`` is never called in replay, the record answers.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

import tachograph
from tachograph.integrations.httpx import instrument

SHOP_URL = os.environ.get("SHOP_URL", "http://127.0.0.1:8765")
PROMPT = "B-2002"


def refund_agent(order_id: str) -> dict[str, Any]:
    """Look the order up; refund it when it was delivered; say what was done."""
    with instrument(httpx.Client(base_url=SHOP_URL, timeout=10)) as client:
        order = client.get(f"/orders/{order_id}").json()
        if order.get("status") != "delivered":
            return {"order": order, "refund": None}
        refund = client.post("/refunds", json={"order_id": order_id, "amount": order["total"]})
        return {"order": order, "refund": refund.json(), "status": refund.status_code}


agent = tachograph.Agent(fn=refund_agent, name="httpx_refund_agent")
