"""LangChain and LangGraph refund agents for the tests, with nothing of tachograph in them
except the adapter's one line (the middleware, or its wrappers on a ``ToolNode``).

The model is langchain-openai's ``ChatOpenAI`` pointed at the fake server on 127.0.0.1; the
refund tool's side effect is a counter in a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from fakes.llm_server import Reply, ScriptRequest, ToolCall, default_script
from tachograph.integrations.langchain import TachographMiddleware

MODEL = "gpt-5.6"
SYSTEM = "You are a careful billing agent. Look the order up, refund it, answer."
PROMPT = "Please refund order B-2002, it arrived broken."


def counter_value(path: Path) -> int:
    return int(json.loads(path.read_text())) if path.exists() else 0


def make_tools(counter: Path, *, total: float = 19.99) -> list[BaseTool]:
    @tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return json.dumps({"order_id": order_id, "status": "delivered", "total": total})

    @tool
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an order."""
        done = counter_value(counter)
        counter.write_text(json.dumps(done + 1))
        return f"refund rf_{done + 1} of {amount} for {order_id} issued"

    return [lookup_order, issue_refund]


def chat_model(base_url: str) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=base_url, api_key="sk-test", max_retries=0)  # type: ignore[arg-type]


def build_agent(
    base_url: str,
    counter: Path,
    *,
    total: float = 19.99,
    effects: dict[str, str] | None = None,
    record: bool = True,
) -> Any:
    middleware = [TachographMiddleware(effects=effects or {"lookup_order": "read"})]
    return create_agent(
        chat_model(base_url),
        make_tools(counter, total=total),
        system_prompt=SYSTEM,
        middleware=middleware if record else [],
    )


def two_turns(graph: Any, prompt: str) -> str:
    first = graph.invoke({"messages": [{"role": "user", "content": prompt}]})
    follow = [*first["messages"], {"role": "user", "content": "Thanks!"}]
    second = graph.invoke({"messages": follow})
    return f"{first['messages'][-1].content} | {second['messages'][-1].content}"


async def atwo_turns(graph: Any, prompt: str) -> str:
    first = await graph.ainvoke({"messages": [{"role": "user", "content": prompt}]})
    follow = [*first["messages"], {"role": "user", "content": "Thanks!"}]
    second = await graph.ainvoke({"messages": follow})
    return f"{first['messages'][-1].content} | {second['messages'][-1].content}"


def tool_graph(
    base_url: str,
    tools: list[BaseTool],
    *,
    checkpointer: Any = None,
    record: bool = True,
    compile: bool = True,
) -> Any:
    """A graph of our own: a model node and a ``ToolNode``, looping until the model answers
    (the builder, not compiled, with ``compile=False``)."""
    recorder = TachographMiddleware(effects={"lookup_order": "read"})
    llm = chat_model(base_url)
    if record:
        recorder.instrument_model(llm)  # the model's line
    bound = llm.bind_tools(tools)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [bound.invoke([("system", SYSTEM), *state["messages"]])]}

    async def acall_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke([("system", SYSTEM), *state["messages"]])]}

    from langchain_core.runnables import RunnableLambda

    node = ToolNode(
        tools,
        wrap_tool_call=recorder.wrap_tool_call if record else None,  # the tools' line
        awrap_tool_call=recorder.awrap_tool_call if record else None,
    )
    builder = StateGraph(MessagesState)
    builder.add_node("model", RunnableLambda(call_model, afunc=acall_model))
    builder.add_node("tools", node)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer) if compile else builder


def approval_tools(counter: Path) -> list[BaseTool]:
    """The refund, and a confirmation that asks a person (``interrupt``)."""
    _, issue_refund = make_tools(counter)

    @tool
    def confirm_with_customer(order_id: str) -> str:
        """Ask the customer to confirm."""
        answer = interrupt({"question": f"Refund {order_id} sent. Anything else?"})
        return f"customer said: {answer}"

    return [issue_refund, confirm_with_customer]


def approval_script(request: ScriptRequest) -> Any:
    """The model refunds and asks for confirmation in one turn, then answers."""
    if request.result_for("issue_refund") is None:
        return Reply(
            tool_calls=[
                ToolCall("issue_refund", {"order_id": "B-2002", "amount": 19.99}),
                ToolCall("confirm_with_customer", {"order_id": "B-2002"}),
            ]
        )
    if "issue_refund" in request.tools:
        confirm = request.result_for("confirm_with_customer")
        return Reply(text=f"Done. {confirm.output if confirm else ''}")
    return default_script(request)
