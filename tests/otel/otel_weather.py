"""A small weather agent for the bridge tests: one model (scripted, OpenAI-shaped), one tool."""

from __future__ import annotations

import json
from typing import Any

import tachograph as tg

MODEL = "gpt-4o-mini-2024-07-18"
SYSTEM = "You are a weather assistant. Answer in one sentence."


@tg.model(MODEL, provider="openai")
def chat(request: dict[str, Any]) -> dict[str, Any]:
    """Asks for the weather tool first, then answers from its result."""
    messages = request["messages"]
    if messages[-1]["role"] == "user":
        return {
            "id": "chatcmpl-1",
            "model": MODEL,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "get_weather",
                                    "arguments": json.dumps({"city": "Paris"}),
                                },
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 86, "completion_tokens": 17, "total_tokens": 103},
        }
    observed = json.loads(messages[-1]["content"])
    return {
        "id": "chatcmpl-2",
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": f"It's {observed['temperature_c']} °C in {observed['city']}.",
                },
            }
        ],
        "usage": {"prompt_tokens": 121, "completion_tokens": 16, "total_tokens": 137},
    }


@tg.tool(effect="read")
def get_weather(city: str) -> dict[str, Any]:
    """A fixed observation."""
    if city == "Atlantis":
        raise LookupError("no such city")
    return {"city": city, "temperature_c": 14, "conditions": "light rain"}


def weather_agent(question: str) -> str:
    """Model, tool, model; records a decision on the way."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    first = chat({"model": MODEL, "messages": messages, "temperature": 0, "seed": 7})
    message = first["choices"][0]["message"]
    messages.append(message)
    call = message["tool_calls"][0]
    tg.decide("tool", call["function"]["name"], chosen_from=["get_weather"], reason="asked")
    result = get_weather(**json.loads(call["function"]["arguments"]))
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
    second = chat({"model": MODEL, "messages": messages, "temperature": 0, "seed": 7})
    return str(second["choices"][0]["message"]["content"])


def failing_agent(question: str) -> str:
    """Calls the tool with a city it does not know; the tool failure ends the run in error."""
    return str(get_weather("Atlantis"))


declared_agent = tg.agent(name="weather_agent", models=[MODEL], tools=[get_weather])(weather_agent)
"""The weather agent with what it declares (so its fingerprint names only its own model)."""
