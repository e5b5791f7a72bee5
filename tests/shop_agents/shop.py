"""An example support agent for the tests: a scripted model, tools of every effect class,
decisions, a guardrail, the clock and randomness.

``build(variant)`` returns the agent; a :class:`Variant` changes one thing about it, so that a
test can record the original and replay a changed version. ``CALLS`` counts how often each
model and tool body really ran, and ``LEDGER`` is the payments/notes fake that counts real
side effects (tests point it at a file of their own).

Module attributes a test may change: ``TAX_PERCENT`` (what the pure tool ``compute_refund``
uses: changing it is a change of that tool's implementation) and ``HANG_IN`` (the name of a
tool that signals and then sleeps, so that a parent process can kill it mid-call; also read
from the ``SHOP_HANG_IN`` environment variable, with ``SHOP_MARKER`` the file it writes).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import tachograph as tg

from .ledger import Ledger

MODEL_ID = "shopbot-2026-10-01"
MODEL_BUILD = "shopbot-2026-10-01+build.7"
"""What the scripted model says answered: the exact build behind the declared id."""
SYSTEM = "You are a careful shop assistant. Refund damaged orders under 100 EUR."

ORDERS: dict[str, dict[str, Any]] = {
    "A-1": {"order_id": "A-1", "price_cents": 2500, "customer": "c-88"},
    "B-2": {"order_id": "B-2", "price_cents": 4000, "customer": "c-12"},
    "C-3": {"order_id": "C-3", "price_cents": 900, "customer": "c-07"},
}

CALLS: collections.Counter[str] = collections.Counter()
LEDGER = Ledger(os.environ.get("SHOP_LEDGER", ":memory:"))
TAX_PERCENT = 0
HANG_IN: str | None = os.environ.get("SHOP_HANG_IN")


def _maybe_hang(name: str) -> None:
    """Signal the parent through a marker file, then sleep until killed."""
    if name == HANG_IN:
        marker = os.environ.get("SHOP_MARKER")
        if marker:  # written aside, then renamed: the parent never reads a half-written file
            Path(marker + ".tmp").write_text(name)
            os.replace(marker + ".tmp", marker)
        time.sleep(120)


# -- the model ----------------------------------------------------------------------------------


@tg.model(MODEL_ID, provider="scripted")
def shop_model(request: dict[str, Any]) -> dict[str, Any]:
    """A deterministic stand-in for an LLM: its answer is a function of the request."""
    CALLS["model"] += 1
    last = request["messages"][-1]
    if last["role"] == "user":
        order = next((w for w in last["content"].split() if w in ORDERS), None)
        message: dict[str, Any] = {
            "role": "assistant",
            "tool_calls": [{"name": "lookup_order", "args": {"order_id": order}}],
        }
    else:
        message = {"role": "assistant", "content": f"Done: {last['content']}"}
    return {
        "id": f"resp-{len(request['messages'])}",
        "model": MODEL_BUILD,
        "choices": [{"message": message}],
        "usage": {"input_tokens": 10 * len(request["messages"]), "output_tokens": 7},
    }


# -- tools --------------------------------------------------------------------------------------


@tg.tool(effect="read", schema_version="1")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Read an order."""
    CALLS["lookup_order"] += 1
    _maybe_hang("lookup_order")
    return dict(ORDERS[order_id])


@tg.tool(effect="read")
def check_stock(order_id: str) -> dict[str, Any]:
    """Read the stock level of an order's item."""
    CALLS["check_stock"] += 1
    return {"order_id": order_id, "in_stock": 3}


@tg.tool(effect="pure")
def compute_refund(price_cents: int, share: float) -> dict[str, Any]:
    """The refund for a price: a pure computation (it depends on ``TAX_PERCENT``)."""
    CALLS["compute_refund"] += 1
    amount = int(price_cents * share)
    return {"amount_cents": amount, "tax_cents": amount * TAX_PERCENT // 100}


def _note_preview(order_id: str, text: str) -> dict[str, Any]:
    return {"note_id": "preview", "order_id": order_id, "text": text}


@tg.tool(effect="write", dry_run=_note_preview)
def post_note(order_id: str, text: str, idempotency_key: str | None = None) -> dict[str, Any]:
    """Attach a note to the order (a write that the notes API deduplicates by key)."""
    CALLS["post_note"] += 1
    result = LEDGER.apply("note", idempotency_key, {"order_id": order_id, "text": text})
    _maybe_hang("post_note")
    return result


@tg.tool(effect="irreversible", key=lambda args: args["order_id"])
def issue_refund(
    order_id: str, amount_cents: int, idempotency_key: str | None = None
) -> dict[str, Any]:
    """Move money (irreversible); the payments API deduplicates by key."""
    CALLS["issue_refund"] += 1
    result = LEDGER.apply(
        "refund", idempotency_key, {"order_id": order_id, "amount_cents": amount_cents}
    )
    _maybe_hang("issue_refund")
    return result


@tg.tool(effect="irreversible", key=lambda args: args["order_id"])
def issue_credit(
    order_id: str, amount_cents: int, idempotency_key: str | None = None
) -> dict[str, Any]:
    """Store credit instead of money back (another tool the agent could choose)."""
    CALLS["issue_credit"] += 1
    return LEDGER.apply(
        "credit", idempotency_key, {"order_id": order_id, "amount_cents": amount_cents}
    )


TOOLS = [lookup_order, check_stock, compute_refund, post_note, issue_refund, issue_credit]


# -- the agent ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variant:
    """One change to the agent; the default is the agent as recorded."""

    prompt: str = SYSTEM
    guard_limit: int = 500
    skip_guardrail: bool = False
    check_stock_first: bool = False
    refund_share: float = 1.0
    refund_tool: str = "issue_refund"
    priority: str | None = None
    stop_after_plan: bool = False
    extra_call_at_end: bool = False
    sign_off: str = "Kind regards"
    fail_at_end: bool = False
    swallow_errors: bool = False
    code_version: str = "shop-1"


def _support(task: dict[str, Any], v: Variant) -> dict[str, Any]:
    message = task["message"]
    if not v.skip_guardrail:
        tg.guardrail("input_length", stage="input", blocked=len(message) > v.guard_limit)
    if len(message) > v.guard_limit:
        return {"status": "blocked"}
    opened_at = tg.now()
    case_id = str(tg.uuid4())
    if v.check_stock_first:
        check_stock(task["order_id"])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": v.prompt},
        {"role": "user", "content": message},
    ]
    answer = shop_model({"model": MODEL_ID, "messages": messages, "temperature": 0})
    call = answer["choices"][0]["message"]["tool_calls"][0]
    order = lookup_order(**call["args"])
    tg.select_plan("refund", chosen_from=["refund", "escalate"], reason="under the limit")
    if v.stop_after_plan:
        return {"status": "stopped", "case_id": case_id}
    refund = compute_refund(order["price_cents"], v.refund_share)
    note = post_note(order["order_id"], f"case {case_id}: refund {refund['amount_cents']}")
    pay = issue_refund if v.refund_tool == "issue_refund" else issue_credit
    if v.swallow_errors:
        try:
            paid = pay(order_id=order["order_id"], amount_cents=refund["amount_cents"])
        except Exception as exc:  # an agent that hides every error from its caller
            paid = {"id": None, "error": str(exc)}
    else:
        paid = pay(order_id=order["order_id"], amount_cents=refund["amount_cents"])
    priority = tg.rng().choice(["low", "normal"])
    tg.decide("priority", v.priority or priority, chosen_from=["low", "normal", "urgent"])
    messages.append({"role": "tool", "content": json.dumps(paid, sort_keys=True)})
    final = shop_model({"model": MODEL_ID, "messages": messages, "temperature": 0})
    text = final["choices"][0]["message"]["content"]
    tg.accept_output("evaluator:policy-v1", reason="refund within policy")
    if v.extra_call_at_end:
        lookup_order(order["order_id"])
    if v.fail_at_end:
        raise RuntimeError("the mail server is down")
    return {
        "case_id": case_id,
        "opened_at": opened_at.isoformat(),
        "note": note.get("note_id") or note.get("id"),
        "refund": paid.get("id"),
        "priority": priority,
        "reply": f"{text} {v.sign_off}",
    }


def build(variant: Variant | None = None) -> tg.Agent:
    """The support agent, as recorded (no variant) or with one change."""
    v = variant or Variant()

    def support(task: dict[str, Any]) -> dict[str, Any]:
        return _support(task, v)

    return tg.agent(
        name="support",
        models=[MODEL_ID],
        prompts={"system": v.prompt},
        tools=TOOLS,
        code_version=v.code_version,
    )(support)


TASK = {"order_id": "A-1", "message": "Order A-1 arrived damaged, please refund it."}


def mark_requests(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A processor (as a redaction would be) that marks every tool intent it has seen."""
    return {**payload, "processed": True} if event_type == "tool.requested" else payload
