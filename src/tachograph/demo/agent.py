"""A billing agent with a deterministic scripted model and a refund tool. No network.

``billing_agent`` is the agent as recorded; ``billing_agent_v2`` is the same agent after a
"small" policy change (refunds capped at half the price), which a replay catches at the exact
step where the refund amount differs. The fake payments API counts real calls, so the demo
and the tests can show that replay never fires the refund again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import tachograph as tg

MODEL = "demo-scripted-2026-11-01"
SYSTEM = (
    "You are a billing agent. Refund damaged orders under 100 EUR; escalate anything else "
    "to a human."
)

ORDERS: dict[str, dict[str, Any]] = {
    "A-4471": {"order_id": "A-4471", "customer": 88, "price_cents": 2500, "status": "delivered"},
    "B-1002": {"order_id": "B-1002", "customer": 12, "price_cents": 18900, "status": "delivered"},
    "C-0007": {"order_id": "C-0007", "customer": 7, "price_cents": 900, "status": "in transit"},
}


class Payments:
    """A fake payments API: counts real calls and deduplicates by idempotency key."""

    def __init__(self) -> None:
        self.calls = 0
        self.applied: dict[str, dict[str, Any]] = {}

    def refund(self, order_id: str, amount_cents: int, key: str | None) -> dict[str, Any]:
        self.calls += 1
        if key is not None and key in self.applied:
            return self.applied[key]
        result = {
            "refund_id": f"re_{len(self.applied) + 1:04d}",
            "order_id": order_id,
            "amount_cents": amount_cents,
            "status": "succeeded",
        }
        if key is not None:
            self.applied[key] = result
        return result


PAYMENTS = Payments()


def _order_id(text: str) -> str | None:
    for word in text.replace(",", " ").replace(".", " ").split():
        if word in ORDERS:
            return word
    return None


@tg.model(MODEL, provider="scripted")
def scripted_model(request: dict[str, Any]) -> dict[str, Any]:
    """A deterministic stand-in for an LLM: its answer is a function of the conversation."""
    messages = request["messages"]
    last = messages[-1]
    turn = sum(1 for m in messages if m["role"] == "assistant")
    if last["role"] == "user":
        order = _order_id(last["content"])
        if order is None:
            return _answer(turn, "I could not find an order number in your message.")
        return _call(turn, "lookup_order", {"order_id": order})
    observation = json.loads(last["content"])
    if "price_cents" in observation:
        if observation["price_cents"] < 10_000:
            return _call(
                turn,
                "issue_refund",
                {"order_id": observation["order_id"], "amount_cents": observation["price_cents"]},
            )
        return _call(turn, "escalate_to_human", {"order_id": observation["order_id"]})
    if observation.get("status") == "succeeded":
        euros = observation["amount_cents"] / 100
        return _answer(turn, f"Refund of {euros:.2f} EUR issued for {observation['order_id']}.")
    if observation.get("status") == "simulated":
        euros = observation["amount_cents"] / 100
        return _answer(
            turn,
            f"Refund of {euros:.2f} EUR would be issued for {observation['order_id']} (dry run).",
        )
    return _answer(turn, f"A colleague will look at {observation.get('order_id')} shortly.")


def _call(turn: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"resp_{turn + 1:02d}",
        "model": MODEL,
        "choices": [
            {"message": {"role": "assistant", "tool_calls": [{"name": tool, "args": args}]}}
        ],
        "usage": {"input_tokens": 40 + 10 * turn, "output_tokens": 12},
    }


def _answer(turn: int, text: str) -> dict[str, Any]:
    return {
        "id": f"resp_{turn + 1:02d}",
        "model": MODEL,
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"input_tokens": 40 + 10 * turn, "output_tokens": len(text.split())},
    }


@tg.tool(effect="read", schema_version="1")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Read an order from the shop's database."""
    order = ORDERS.get(order_id)
    if order is None:
        raise KeyError(f"no order {order_id}")
    return dict(order)


def _simulated_refund(order_id: str, amount_cents: int) -> dict[str, Any]:
    """What a refund would look like, for dry runs (forks, unconfirmed resumes)."""
    return {
        "refund_id": "re_dryrun",
        "order_id": order_id,
        "amount_cents": amount_cents,
        "status": "simulated",
    }


@tg.tool(
    effect="irreversible",
    schema_version="2",
    key=lambda args: args["order_id"],
    dry_run=_simulated_refund,
)
def issue_refund(
    order_id: str, amount_cents: int, idempotency_key: str | None = None
) -> dict[str, Any]:
    """Refund money through the payments API (an irreversible side effect)."""
    return PAYMENTS.refund(order_id, amount_cents, idempotency_key)


@tg.tool(effect="write", schema_version="1")
def escalate_to_human(order_id: str) -> dict[str, Any]:
    """Open a ticket for a human colleague."""
    return {"ticket": f"T-{order_id}", "order_id": order_id, "status": "open"}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "lookup_order": lookup_order,
    "issue_refund": issue_refund,
    "escalate_to_human": escalate_to_human,
}


MAX_TASK_CHARS = 2000
"""The input guardrail: longer requests are refused before any model call."""


def _run(task: str, *, refund_share: float) -> str:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task},
    ]
    if len(task) > MAX_TASK_CHARS:
        tg.guardrail(
            "input_length", stage="input", blocked=True, reason=f"over {MAX_TASK_CHARS} characters"
        )
        return f"I can only handle requests of up to {MAX_TASK_CHARS} characters."
    tg.guardrail("input_length", stage="input", passed=True)
    for _ in range(6):
        response = scripted_model({"model": MODEL, "messages": messages, "temperature": 0})
        message = response["choices"][0]["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            answer = str(message["content"])
            tg.accept_output(
                "evaluator:refund-policy-v3", output=answer, reason="policy checks pass"
            )
            return answer
        call = calls[0]
        args = dict(call["args"])
        if call["name"] == "issue_refund":
            tg.select_plan(
                "refund",
                chosen_from=["refund", "escalate"],
                reason="damaged on arrival, under 100 EUR",
            )
            args["amount_cents"] = int(args["amount_cents"] * refund_share)
        elif call["name"] == "escalate_to_human":
            tg.select_plan("escalate", chosen_from=["refund", "escalate"], reason="over the limit")
        result = TOOLS[call["name"]](**args)
        messages.append({"role": "tool", "content": json.dumps(result)})
    tg.reject_output("evaluator:refund-policy-v3", reason="no answer after 6 turns")
    return "I could not resolve this request."


@tg.agent(
    name="billing_agent",
    models=[MODEL],
    prompts={"billing_system": SYSTEM},
    tools=[lookup_order, issue_refund, escalate_to_human],
    code_version="demo-1",
)
def billing_agent(task: str) -> str:
    """The billing agent as it was recorded."""
    return _run(task, refund_share=1.0)


@tg.agent(
    name="billing_agent",
    models=[MODEL],
    prompts={"billing_system": SYSTEM},
    tools=[lookup_order, issue_refund, escalate_to_human],
    code_version="demo-2",
)
def billing_agent_v2(task: str) -> str:
    """The same agent after a policy change: refunds are capped at half the price."""
    return _run(task, refund_share=0.5)
