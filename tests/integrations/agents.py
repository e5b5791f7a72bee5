"""Tool-using agents written the way real agents are: straight on the provider SDKs.

Nothing here knows about tachograph except the two ``@tachograph.tool`` functions; the same
agent code runs when recording, when replaying and outside any run.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai

import tachograph

OPENAI_MODEL = "gpt-5.6"
OPENAI_SNAPSHOT = "gpt-5.6-2026-09-30"
ANTHROPIC_MODEL = "claude-sonnet-5"
ANTHROPIC_SNAPSHOT = "claude-sonnet-5-20260930"
SYSTEM = "You are a careful billing agent. Look the order up, refund it, then answer briefly."
PROMPT = "Please refund order B-2002, it arrived broken."

_ORDER = {"type": "string", "description": "The order id, e.g. B-2002."}
CHAT_TOOLS: list[Any] = [
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
RESPONSES_TOOLS: list[Any] = [{"type": "function", **tool["function"]} for tool in CHAT_TOOLS]
ANTHROPIC_TOOLS: list[Any] = [
    {
        "name": tool["function"]["name"],
        "description": tool["function"]["description"],
        "input_schema": tool["function"]["parameters"],
    }
    for tool in CHAT_TOOLS
]

REFUNDS: list[dict[str, Any]] = []
"""Every refund that really ran; a replay must not add to it."""


@tachograph.tool(effect="read")
def lookup_order(order_id: str) -> dict[str, Any]:
    """The order as the shop knows it."""
    return {"order_id": order_id, "status": "delivered", "total": 19.99}


@tachograph.tool(effect="irreversible")
def issue_refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order (counted in REFUNDS)."""
    REFUNDS.append({"order_id": order_id, "amount": amount})
    return {"refund_id": f"rf_{len(REFUNDS)}", "order_id": order_id, "amount": amount}


TOOLS: dict[str, Callable[..., Any]] = {"lookup_order": lookup_order, "issue_refund": issue_refund}


def run_tool(name: str, arguments: dict[str, Any]) -> str:
    return json.dumps(TOOLS[name](**arguments))


def declared(fn: Callable[[str], Any], name: str) -> tachograph.Agent:
    """The agent with what it declares, so that record and replay fingerprint the same."""
    return tachograph.Agent(
        fn=fn, name=name, tools=(lookup_order, issue_refund), code_version="test-agent-1"
    )


def plain(fn: Callable[[str], Any]) -> tachograph.Agent:
    """A bare agent function with a fixed code version (no package or git lookup)."""
    return tachograph.Agent(fn=fn, name=fn.__name__, code_version="test-agent-1")


# -- OpenAI chat completions ------------------------------------------------------------------


def chat_agent(
    client: openai.OpenAI,
    *,
    system: str = SYSTEM,
    temperature: float = 0.2,
    tools: list[Any] = CHAT_TOOLS,
) -> Callable[[str], dict[str, Any]]:
    """The classic loop: call the model, run the tool calls it asks for, until it answers."""

    def run(prompt: str) -> dict[str, Any]:
        messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ]
        tokens = 0
        for _ in range(6):
            completion = client.chat.completions.create(
                model=OPENAI_MODEL,
                messages=messages,
                tools=tools,
                temperature=temperature,
                seed=7,
            )
            assert completion.usage is not None
            tokens += completion.usage.total_tokens
            message = completion.choices[0].message
            if not message.tool_calls:
                return {"answer": message.content, "model": completion.model, "tokens": tokens}
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                assert call.type == "function"
                output = run_tool(call.function.name, json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise RuntimeError("the model never answered")

    return run


def async_chat_agent(
    client: openai.AsyncOpenAI, *, system: str = SYSTEM
) -> Callable[[str], Awaitable[dict[str, Any]]]:
    """The same loop on ``AsyncOpenAI``."""

    async def run(prompt: str) -> dict[str, Any]:
        messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ]
        for _ in range(6):
            completion = await client.chat.completions.create(
                model=OPENAI_MODEL, messages=messages, tools=CHAT_TOOLS, temperature=0.2
            )
            message = completion.choices[0].message
            if not message.tool_calls:
                return {"answer": message.content, "model": completion.model}
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                assert call.type == "function"
                output = run_tool(call.function.name, json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise RuntimeError("the model never answered")

    return run


def streaming_chat_agent(
    client: openai.OpenAI, seen: list[Any], *, system: str = SYSTEM
) -> Callable[[str], dict[str, Any]]:
    """The loop on ``stream=True``: tool calls are assembled from deltas, chunk by chunk.

    Every chunk the SDK yields is appended to ``seen`` (as the SDK's own ``model_dump``).
    """

    def run(prompt: str) -> dict[str, Any]:
        messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ]
        for _ in range(6):
            stream = client.chat.completions.create(
                model=OPENAI_MODEL,
                messages=messages,
                tools=CHAT_TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            text = ""
            calls: dict[int, dict[str, Any]] = {}
            for chunk in stream:
                seen.append(chunk.model_dump())
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for delta in choice.delta.tool_calls or []:
                        call = calls.setdefault(delta.index, {"id": "", "name": "", "args": ""})
                        call["id"] = delta.id or call["id"]
                        if delta.function is not None:
                            call["name"] += delta.function.name or ""
                            call["args"] += delta.function.arguments or ""
            if not calls:
                return {"answer": text, "chunks": len(seen)}
            messages.append(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["args"]},
                        }
                        for c in calls.values()
                    ],
                }
            )
            for c in calls.values():
                output = run_tool(c["name"], json.loads(c["args"]))
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": output})
        raise RuntimeError("the model never answered")

    return run


# -- OpenAI responses -------------------------------------------------------------------------


def responses_agent(
    client: openai.OpenAI, *, stream: bool = False, system: str = SYSTEM
) -> Callable[[str], dict[str, Any]]:
    """The loop on the responses API; with ``stream`` through ``client.responses.stream``."""

    def run(prompt: str) -> dict[str, Any]:
        items: list[Any] = [{"role": "user", "content": prompt}]
        events: list[str] = []
        for _ in range(6):
            if stream:
                with client.responses.stream(
                    model=OPENAI_MODEL, instructions=system, input=items, tools=RESPONSES_TOOLS
                ) as live:
                    events.extend(event.type for event in live)
                    response = live.get_final_response()
            else:
                response = client.responses.create(
                    model=OPENAI_MODEL, instructions=system, input=items, tools=RESPONSES_TOOLS
                )
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return {"answer": response.output_text, "model": response.model, "events": events}
            for call in calls:
                items.append(call.model_dump(exclude_none=True))
                output = run_tool(call.name, json.loads(call.arguments))
                items.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": output}
                )
        raise RuntimeError("the model never answered")

    return run


# -- Anthropic messages -----------------------------------------------------------------------


def _assistant_turn(message: anthropic.types.Message) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [block.model_dump(exclude_none=True) for block in message.content],
    }


def _tool_results(message: anthropic.types.Message) -> list[Any]:
    results: list[Any] = []
    for block in message.content:
        if block.type == "tool_use":
            assert isinstance(block.input, dict)
            output = run_tool(block.name, block.input)
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": output})
    return results


def messages_agent(
    client: anthropic.Anthropic, *, stream: bool = False, system: str = SYSTEM
) -> Callable[[str], dict[str, Any]]:
    """The loop on ``messages.create``; with ``stream`` through ``client.messages.stream``."""

    def run(prompt: str) -> dict[str, Any]:
        messages: list[Any] = [{"role": "user", "content": prompt}]
        texts: list[str] = []
        for _ in range(6):
            if stream:
                with client.messages.stream(
                    model=ANTHROPIC_MODEL,
                    max_tokens=512,
                    system=system,
                    messages=messages,
                    tools=ANTHROPIC_TOOLS,
                ) as live:
                    texts.extend(live.text_stream)
                    message = live.get_final_message()
            else:
                message = client.messages.create(
                    model=ANTHROPIC_MODEL,
                    max_tokens=512,
                    system=system,
                    messages=messages,
                    tools=ANTHROPIC_TOOLS,
                )
            results = _tool_results(message)
            if not results:
                return {
                    "answer": "".join(b.text for b in message.content if b.type == "text"),
                    "model": message.model,
                    "usage": message.usage.output_tokens,
                    "streamed": texts,
                }
            messages.append(_assistant_turn(message))
            messages.append({"role": "user", "content": results})
        raise RuntimeError("the model never answered")

    return run


def async_messages_agent(
    client: anthropic.AsyncAnthropic, *, system: str = SYSTEM
) -> Callable[[str], Awaitable[dict[str, Any]]]:
    """The loop on ``AsyncAnthropic`` with ``stream=True`` raw events."""

    async def run(prompt: str) -> dict[str, Any]:
        messages: list[Any] = [{"role": "user", "content": prompt}]
        kinds: list[str] = []
        for _ in range(6):
            async with client.messages.stream(
                model=ANTHROPIC_MODEL,
                max_tokens=512,
                system=system,
                messages=messages,
                tools=ANTHROPIC_TOOLS,
            ) as live:
                async for event in live:
                    kinds.append(event.type)
                message = await live.get_final_message()
            results = _tool_results(message)
            if not results:
                text = "".join(b.text for b in message.content if b.type == "text")
                return {"answer": text, "model": message.model, "events": kinds}
            messages.append(_assistant_turn(message))
            messages.append({"role": "user", "content": results})
        raise RuntimeError("the model never answered")

    return run
