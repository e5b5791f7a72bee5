"""A refund agent on the OpenAI Agents SDK, recorded by tachograph with one line.

A triage agent hands off to a billing agent, which looks the order up (a read) and refunds it
(a side effect: a counter in a file); an input guardrail screens the request and an output
guardrail the answer. Two user turns share one conversation. ``agent`` is the declared
tachograph agent that ``tacho test corpus/openai_agents --agent
examples.openai_agents_refund:agent`` replays; the model is the Responses API at
``OPENAI_BASE_URL`` (never called in replay).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunContextWrapper,
    Runner,
    function_tool,
    input_guardrail,
    output_guardrail,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

import tachograph
from tachograph.integrations.openai_agents import instrument

MODEL = "gpt-5.6"
PROMPT = "Please refund order B-2002, it arrived broken."

set_tracing_disabled(True)  # the SDK would export its traces to OpenAI; the record is ours


@function_tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order."""
    return {"order_id": order_id, "status": "delivered", "total": 19.99}


@function_tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    counter = Path(os.environ.get("REFUND_COUNTER", "refunds.json"))
    done = json.loads(counter.read_text()) if counter.exists() else 0
    counter.write_text(json.dumps(done + 1))
    return f"refund rf_{done + 1} of {amount} for {order_id} issued"


@input_guardrail
def no_injection(ctx: RunContextWrapper[Any], agent: Agent[Any], data: Any) -> Any:
    text = (data if isinstance(data, str) else json.dumps(data)).lower()
    return GuardrailFunctionOutput(
        output_info="injection" if "ignore previous" in text else "clean",
        tripwire_triggered="ignore previous" in text,
    )


@output_guardrail
def polite(ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> Any:
    return GuardrailFunctionOutput(output_info="ok", tripwire_triggered="stupid" in output)


TOOLS = (lookup_order, issue_refund)


def build(base_url: str | None = None) -> Agent[Any]:
    """The triage agent (its billing agent behind a handoff), instrumented."""
    billing = Agent(
        name="billing",
        instructions="You are a careful billing agent. Look the order up, refund it, answer.",
        model=MODEL,
        tools=list(TOOLS),
        output_guardrails=[polite],
    )
    triage = Agent(
        name="triage",
        instructions="Route refund requests to billing.",
        model=MODEL,
        handoffs=[billing],
        input_guardrails=[no_injection],
    )
    client = AsyncOpenAI(
        base_url=base_url or os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "sk-unused-in-replay"),
    )
    instrument(triage, client=client, effects={"lookup_order": "read"})  # the one line of glue
    return triage


async def run_refund(prompt: str) -> str:
    """Two user turns: the refund, then a thank-you on the same conversation."""
    triage = build()
    first = await Runner.run(triage, prompt)
    follow = [*first.to_input_list(), {"role": "user", "content": "Thanks!"}]
    second = await Runner.run(first.last_agent, follow)
    return f"{first.final_output} | {second.final_output}"


agent = tachograph.Agent(
    fn=run_refund, name="agents_refund", tools=TOOLS, code_version="examples-1"
)
