"""A refund agent written on the OpenAI Agents SDK, with nothing of tachograph in it.

A triage agent hands off to a billing agent, which looks the order up (a read) and refunds it
(a side effect: a counter in a file). An input guardrail screens the request and an output
guardrail the answer. ``build`` returns fresh agent objects, as an application would build
them at start-up.
"""

from __future__ import annotations

import json
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
)

from fakes.llm_server import Reply, ScriptRequest, ToolCall, default_script

MODEL = "gpt-5.6"
PROMPT = "Please refund order B-2002, it arrived broken."


def script(request: ScriptRequest) -> Any:
    """The fake model: the triage agent hands off, the billing agent runs the refund loop."""
    if "transfer_to_billing" in request.tools and request.result_for("transfer_to_billing") is None:
        return Reply(tool_calls=[ToolCall("transfer_to_billing", {})])
    return default_script(request)


def build(counter: Path, *, total: float = 19.99) -> Agent[Any]:
    """The triage agent (its billing agent behind a handoff); ``total`` is what the lookup
    reports, so that a test can change a tool's answer and nothing else."""

    @function_tool
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order."""
        return {"order_id": order_id, "status": "delivered", "total": total}

    @function_tool
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        done = json.loads(counter.read_text()) if counter.exists() else 0
        counter.write_text(json.dumps(done + 1))
        return f"refund rf_{done + 1} of {amount} for {order_id} issued"

    @input_guardrail
    def no_injection(ctx: RunContextWrapper[Any], agent: Agent[Any], data: Any) -> Any:
        text = data if isinstance(data, str) else json.dumps(data)
        return GuardrailFunctionOutput(
            output_info="injection" if "ignore previous" in text.lower() else "clean",
            tripwire_triggered="ignore previous" in text.lower(),
        )

    @output_guardrail
    def polite(ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> Any:
        return GuardrailFunctionOutput(output_info="ok", tripwire_triggered="stupid" in output)

    billing = Agent(
        name="billing",
        instructions="You are a careful billing agent. Look the order up, refund it, answer.",
        model=MODEL,
        tools=[lookup_order, issue_refund],
        output_guardrails=[polite],
    )
    return Agent(
        name="triage",
        instructions="Route refund requests to billing.",
        model=MODEL,
        handoffs=[billing],
        input_guardrails=[no_injection],
    )


async def run_agent(agent: Agent[Any], prompt: str) -> str:
    """Two user turns: the refund, then a thank-you on the same conversation."""
    first = await Runner.run(agent, prompt)
    follow = [*first.to_input_list(), {"role": "user", "content": "Thanks!"}]
    second = await Runner.run(first.last_agent, follow)
    return f"{first.final_output} | {second.final_output}"
