"""A refund agent on LangChain's ``create_agent``, recorded with tachograph's middleware.

``agent`` is what ``tacho test corpus/langchain --agent examples.langchain_refund:agent``
replays. The model is ``ChatOpenAI`` at ``OPENAI_BASE_URL``; the refund tool's side effect is a
counter in ``REFUNDS_FILE`` (default ``refunds.json`` in the working directory). In replay the
record answers the model and the refund, so neither a server nor the file is touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import tachograph
from tachograph.integrations.langchain import TachographMiddleware

MODEL = "gpt-5.6"
SYSTEM = "You are a careful billing agent. Look the order up, refund it, answer."


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return json.dumps({"order_id": order_id, "status": "delivered", "total": 19.99})


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    counter = Path(os.environ.get("REFUNDS_FILE", "refunds.json"))
    done = json.loads(counter.read_text()) if counter.exists() else 0
    counter.write_text(json.dumps(done + 1))
    return f"refund rf_{done + 1} of {amount} for {order_id} issued"


def build(*, base_url: str | None = None) -> Any:
    """The agent graph: ChatOpenAI, the two tools and the one line of tachograph."""
    llm = ChatOpenAI(
        model=MODEL,
        base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ.get("OPENAI_API_KEY", "sk-local"),  # type: ignore[arg-type]
        max_retries=0,
    )
    return create_agent(
        llm,
        [lookup_order, issue_refund],
        system_prompt=SYSTEM,
        middleware=[TachographMiddleware(effects={"lookup_order": "read"})],  # the one line
    )


def _text(state: dict[str, Any]) -> str:
    return str(state["messages"][-1].content)


def refund_agent(prompt: str) -> str:
    """Two user turns on one conversation: the refund, then a thank-you."""
    graph = build()
    first = graph.invoke({"messages": [{"role": "user", "content": prompt}]})
    second = graph.invoke(
        {"messages": [*first["messages"], {"role": "user", "content": "Thanks!"}]}
    )
    return f"{_text(first)} | {_text(second)}"


agent = tachograph.Agent(
    fn=refund_agent,
    name="langchain_refund",
    tools=(lookup_order, issue_refund),
    models=(MODEL,),
    code_version="examples-1",
)
