"""The agent of the golden OTLP files: a chat-completions tool loop on the OpenAI SDK.

``scripts/make_otel_goldens.py`` runs it under each third-party instrumentation against the
fake model server; the replay tests run the same loop through
``tachograph.integrations.openai`` against the imported runs, with the server stopped.
Nothing here knows about tachograph or about tracing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MODEL = "gpt-5.6"
SYSTEM = "You are a careful billing agent. Look the order up, refund it, then answer briefly."
PROMPT = "Please refund order B-2002, it arrived broken."

_ORDER = {"type": "string", "description": "The order id, e.g. B-2002."}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": _ORDER},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "issue_refund",
            "description": "Refund an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": _ORDER, "amount": {"type": "number"}},
                "required": ["order_id", "amount"],
            },
        },
    },
]


def lookup_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "delivered", "total": 19.99}


def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    return {"refund_id": "rf_1", "order_id": order_id, "amount": amount}


PLAIN_TOOLS: dict[str, Callable[..., Any]] = {
    "lookup_order": lookup_order,
    "issue_refund": issue_refund,
}


def chat_loop(
    client: Any, prompt: str = PROMPT, *, tools: dict[str, Callable[..., Any]] | None = None
) -> str:
    """Call the model, run the tools it asks for, until it answers; returns the answer."""
    run_tool = tools or PLAIN_TOOLS
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": prompt},
    ]
    for _ in range(6):
        completion = client.chat.completions.create(
            model=MODEL, messages=messages, tools=TOOLS, temperature=0.2, seed=7
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return str(message.content)
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = run_tool[call.function.name](**json.loads(call.function.arguments))
            output = json.dumps(result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    raise RuntimeError("the model never answered")
