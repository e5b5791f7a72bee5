"""Variants of the demo billing agent that a corpus is recorded with or replayed against.

``lenient_billing_agent`` carries the bug the example corpus keeps as bad runs: when the
model escalates an order over the refund limit, it refunds the order anyway. It reuses the
demo's model and tools (and declares none of its own), so it can be imported under two module
names in one process without registering anything twice.
"""

from __future__ import annotations

import json
import re
from typing import Any

import tachograph as tg
from tachograph.demo import agent as demo

GOODWILL_LIMIT_CENTS = 50_000
"""The bug: anything under 500 EUR is refunded, whatever the model said."""


def _lenient_run(task: str) -> str:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": demo.SYSTEM},
        {"role": "user", "content": task},
    ]
    if len(task) > demo.MAX_TASK_CHARS:
        tg.guardrail("input_length", stage="input", blocked=True)
        return "too long"
    tg.guardrail("input_length", stage="input", passed=True)
    order: dict[str, Any] = {}
    for _ in range(6):
        response = demo.scripted_model(
            {"model": demo.MODEL, "messages": messages, "temperature": 0}
        )
        message = response["choices"][0]["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            answer = str(message["content"])
            tg.accept_output(
                "evaluator:refund-policy-v3", output=answer, reason="policy checks pass"
            )
            return answer
        name, args = calls[0]["name"], dict(calls[0]["args"])
        if name == "escalate_to_human" and order.get("price_cents", 0) < GOODWILL_LIMIT_CENTS:
            name, args = (
                "issue_refund",
                {
                    "order_id": order["order_id"],
                    "amount_cents": order["price_cents"],
                },
            )
            tg.select_plan(
                "refund", chosen_from=["refund", "escalate"], reason="goodwill under 500 EUR"
            )
        elif name == "issue_refund":
            tg.select_plan(
                "refund",
                chosen_from=["refund", "escalate"],
                reason="damaged on arrival, under 100 EUR",
            )
        elif name == "escalate_to_human":
            tg.select_plan("escalate", chosen_from=["refund", "escalate"], reason="over the limit")
        result = demo.TOOLS[name](**args)
        if name == "lookup_order":
            order = dict(result)
        messages.append({"role": "tool", "content": json.dumps(result)})
    tg.reject_output("evaluator:refund-policy-v3", reason="no answer after 6 turns")
    return "I could not resolve this request."


@tg.agent(
    name="billing_agent",
    models=[demo.MODEL],
    prompts={"billing_system": demo.SYSTEM},
    tools=[demo.lookup_order, demo.issue_refund, demo.escalate_to_human],
    code_version="demo-1-lenient",
)
def lenient_billing_agent(task: str) -> str:
    """The billing agent with the goodwill bug: refunds escalations under 500 EUR."""
    return _lenient_run(task)


_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def mask_emails(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A processor for ``save``: every e-mail address in any string becomes ``<email>``."""

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _EMAIL.sub("<email>", value)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        return value

    return walk(payload)  # type: ignore[no-any-return]


def dies_on_order_c0007(task: str) -> str:
    """``billing_agent_v2``, except that replaying a task about order C-0007 in a worker
    process ends that process at once (as a crash in a native library or the kernel's
    out-of-memory killer would)."""
    import multiprocessing
    import os
    import signal

    if "C-0007" in task and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return demo.billing_agent_v2(task)


def broken_billing_agent(task: str) -> str:
    """The billing agent after a deploy that broke it: a dependency it needs is missing."""
    raise ImportError("No module named 'openai'")


def exiting_billing_agent(task: str) -> str:
    """An agent that exits cleanly before doing anything: ``sys.exit(0)``."""
    raise SystemExit(0)


def os_exiting_billing_agent(task: str) -> str:
    """An agent that ends its process with status 0 before doing anything: ``os._exit(0)``
    (a CLI entry point called as a library, a child-process idiom in the wrong place)."""
    import os

    os._exit(0)


def waits_in_workers(task: str) -> str:
    """``billing_agent_v2``, except that a replay in a worker process first writes its
    process id as a line of the file ``TACHOGRAPH_TEST_REPLAY_LOG`` names, then waits there
    for ten minutes (a replay that takes long): for tests that stop ``tacho test`` while its
    workers replay."""
    import multiprocessing
    import os
    import time

    log = os.environ.get("TACHOGRAPH_TEST_REPLAY_LOG")
    if log and multiprocessing.parent_process() is not None:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
        time.sleep(600)
    return demo.billing_agent_v2(task)


def raises_after_billing_agent_v2(task: str) -> str:
    """``billing_agent_v2``, then a crash once it has done everything it did."""
    demo.billing_agent_v2(task)
    raise RuntimeError("crashed after the fact")


def exploding_processor(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """A processor that fails on the first model request it sees."""
    if event_type == "model.request":
        raise ValueError("processor exploded")
    return payload


def dropping_processor(event_type: str, payload: dict[str, Any]) -> Any:
    """A processor that hands back no payload for tool results."""
    return 42 if event_type == "tool.completed" else payload
