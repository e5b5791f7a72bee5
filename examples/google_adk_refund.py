"""A refund agent on Google ADK, recorded by tachograph with one plugin.

A triage agent transfers to a billing agent (ADK's ``transfer_to_agent``), which looks the
order up (a read) and refunds it (a side effect: a counter in a file). Two user turns share
one session. ``agent`` is the declared tachograph agent that ``tacho test corpus/google_adk
--agent examples.google_adk_refund:agent`` replays; the model is Claude through ADK's
``AnthropicLlm``, at ``ANTHROPIC_BASE_URL`` (never called in replay).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from anthropic import AsyncAnthropic
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.anthropic_llm import AnthropicLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool
from google.genai import types

import tachograph
from tachograph.integrations.google_adk import TachographPlugin

MODEL = "claude-sonnet-4-5"
PROMPT = "Please refund order B-2002, it arrived broken."


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order."""
    return {"order_id": order_id, "status": "delivered", "total": 19.99}


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    counter = Path(os.environ.get("REFUND_COUNTER", "refunds.json"))
    done = json.loads(counter.read_text()) if counter.exists() else 0
    counter.write_text(json.dumps(done + 1))
    return f"refund rf_{done + 1} of {amount} for {order_id} issued"


TOOLS = (FunctionTool(lookup_order), FunctionTool(issue_refund))


def build(
    base_url: str | None = None,
    *,
    tools: tuple[Callable[..., Any] | FunctionTool, ...] = TOOLS,
    effects: dict[str, str] | None = None,
) -> InMemoryRunner:
    """The runner of the triage agent (its billing agent behind a transfer)."""
    client = AsyncAnthropic(
        base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
        api_key=os.environ.get("ANTHROPIC_API_KEY", "sk-unused-in-replay"),
    )
    model = AnthropicLlm(model=MODEL, client=client)
    billing = LlmAgent(
        name="billing",
        model=model,
        description="Refunds damaged orders.",
        instruction="You are a careful billing agent. Look the order up, refund it, answer.",
        tools=list(tools),
        disallow_transfer_to_parent=True,
        disallow_transfer_to_peers=True,
    )
    triage = LlmAgent(
        name="triage", model=model, instruction="Route refunds to billing.", sub_agents=[billing]
    )
    # the one line of glue: record every model call, tool and transfer of the runner's agents
    plugin = TachographPlugin(effects=effects or {"lookup_order": "read"})
    return InMemoryRunner(app=App(name="shop", root_agent=triage, plugins=[plugin]))


async def _turn(runner: InMemoryRunner, session_id: str, text: str) -> str:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    said: list[str] = []
    async for event in runner.run_async(user_id="u1", session_id=session_id, new_message=message):
        if event.content and event.content.parts:
            said.extend(p.text for p in event.content.parts if p.text)
    return " ".join(said)


async def converse(runner: InMemoryRunner, prompt: str) -> str:
    """Two user turns on one session: the refund, then a thank-you."""
    session = await runner.session_service.create_session(app_name="shop", user_id="u1")
    first = await _turn(runner, session.id, prompt)
    second = await _turn(runner, session.id, "Thanks!")
    return f"{first} | {second}"


async def run_refund(prompt: str) -> str:
    """The agent the corpus replays: built afresh, then the two turns."""
    return await converse(build(), prompt)


agent = tachograph.Agent(fn=run_refund, name="adk_refund", tools=TOOLS, code_version="examples-1")
