"""A refund agent whose tools live on an MCP server, recorded with tachograph.

The model is called through the OpenAI SDK (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); the
tools are those the MCP shop server (``mcp_shop_server.py`` beside this file) lists: started
over stdio by default, or reached over streamable HTTP at ``MCP_SHOP_URL``. The conversation
has two user turns: the refund request, then a thank-you.

``agent`` (``examples.mcp_refund:agent``) is what ``tacho test corpus/mcp`` replays; in a
replay neither the model nor the MCP server is reached, and the server is not even started.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from openai import AsyncOpenAI

import tachograph
from tachograph.integrations.mcp import instrument
from tachograph.integrations.openai import instrument as instrument_openai

MODEL = "gpt-5.6"
SYSTEM = "You are a careful billing agent. Look the order up, refund it, answer."
PROMPT = "Please refund order B-2002, it arrived broken."
SERVER_SCRIPT = Path(__file__).with_name("mcp_shop_server.py")


def shop_server() -> StdioServerParameters | str:
    """Where the shop is: ``MCP_SHOP_URL`` (streamable HTTP), else a stdio subprocess."""
    url = os.environ.get("MCP_SHOP_URL")
    if url:
        return url
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVER_SCRIPT), "stdio"], env=dict(os.environ)
    )


def openai_tool(tool: Any) -> dict[str, Any]:
    """An MCP tool as an OpenAI function tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.input_schema,
        },
    }


def text_of(result: Any) -> str:
    """What the model is shown of a tool result: its text blocks."""
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def converse(client: Client, llm: AsyncOpenAI, turns: list[str]) -> str:
    """The agent loop: each user turn, then model calls and MCP tool calls until an answer."""
    listing = await client.list_tools()
    tools = [openai_tool(t) for t in listing.tools]
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    answers = []
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        while True:
            completion = await llm.chat.completions.create(
                model=MODEL, messages=messages, tools=tools
            )
            message = completion.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                answers.append(message.content or "")
                break
            for call in message.tool_calls:
                result = await client.call_tool(
                    call.function.name, json.loads(call.function.arguments or "{}")
                )
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": text_of(result)}
                )
    return " | ".join(answers)


async def refund_agent(prompt: str, *, effects: dict[str, str] | None = None) -> str:
    """The refund conversation; ``effects`` overrides the effects the tool annotations give."""
    llm = instrument_openai(AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY", "sk-none")))
    client = instrument(Client(shop_server()), effects=effects)  # the one line for MCP
    async with client:
        return await converse(client, llm, [prompt, "Thanks!"])


agent = tachograph.Agent(fn=refund_agent, name="mcp_refund", code_version="examples-1")
