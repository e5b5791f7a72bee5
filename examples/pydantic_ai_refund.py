"""A refund agent on pydantic-ai, recorded by tachograph with one capability.

A triage agent delegates to a billing agent (a tool that runs it), which looks the order up
(a read) and refunds it (a side effect: a counter in a file); an output validator checks the
billing agent's answer. Two user turns share one conversation. ``agent`` is the declared
tachograph agent that ``tacho test corpus/pydantic_ai --agent
examples.pydantic_ai_refund:agent`` replays; the model is an OpenAI-compatible server at
``OPENAI_BASE_URL`` (never called in replay).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, ModelRetry, RunContext, Tool
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import tachograph
from tachograph.integrations.pydantic_ai import Tachograph

MODEL = "gpt-5.6"
PROMPT = "Please refund order B-2002, it arrived broken."


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order."""
    return {"order_id": order_id, "status": "delivered", "total": 19.99}


def _counter() -> Path:
    return Path(os.environ.get("REFUND_COUNTER", "refunds.json"))


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    counter = _counter()
    done = json.loads(counter.read_text()) if counter.exists() else 0
    counter.write_text(json.dumps(done + 1))
    return f"refund rf_{done + 1} of {amount} for {order_id} issued"


TOOLS = (Tool(lookup_order), Tool(issue_refund))


def build(
    base_url: str | None = None,
    *,
    tools: tuple[Tool[None], ...] = TOOLS,
    effects: dict[str, str] | None = None,
) -> Agent[None, str]:
    """The triage agent, its billing agent (with ``tools``) behind the ``ask_billing`` tool."""
    model = OpenAIChatModel(
        MODEL,
        provider=OpenAIProvider(
            base_url=base_url or os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            api_key=os.environ.get("OPENAI_API_KEY", "sk-unused-in-replay"),
        ),
    )
    # the one line of glue: record every model call, tool and decision of both agents
    recorder = Tachograph(effects=effects or {"lookup_order": "read"}, delegates={"ask_billing"})
    billing = Agent(
        model,
        name="billing",
        instructions="You are a careful billing agent. Look the order up, refund it, answer.",
        tools=list(tools),
        capabilities=[recorder],
    )

    @billing.output_validator
    def polite(output: str) -> str:
        if "stupid" in output.lower():
            raise ModelRetry("be polite")
        return output

    triage = Agent(
        model,
        name="triage",
        instructions="Route refund requests to billing with ask_billing.",
        capabilities=[recorder],
    )

    @triage.tool
    async def ask_billing(ctx: RunContext[None], request: str) -> str:
        """Hand a billing request to the billing agent."""
        result = await billing.run(request, usage=ctx.usage)
        return result.output

    return triage


async def converse(triage: Agent[None, str], prompt: str) -> str:
    """Two user turns: the refund, then a thank-you on the same conversation."""
    first = await triage.run(prompt)
    second = await triage.run("Thanks!", message_history=first.all_messages())
    return f"{first.output} | {second.output}"


async def run_refund(prompt: str) -> str:
    """The agent the corpus replays: built afresh, then the two turns."""
    return await converse(build(), prompt)


agent = tachograph.Agent(fn=run_refund, name="pyai_refund", tools=TOOLS, code_version="examples-1")
