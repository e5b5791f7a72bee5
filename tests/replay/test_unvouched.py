"""Tool calls the record cannot vouch for: a model answer asks for a tool call and no tool
event follows. Flagged while recording (a warning per tool), carried by run.finished, shown by
``tacho show`` and ``tacho verify``, and never called reproduced by replay.

The agent is the loop LangGraph's prebuilt agents run: the instrumented OpenAI SDK against the
fake provider server on 127.0.0.1, and real LangChain ``@tool`` functions that are not also
decorated with ``@tachograph.tool``."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anthropic
import openai
import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.tools import BaseTool
from langchain_core.tools import tool as lc_tool
from langchain_core.utils.function_calling import convert_to_openai_tool

import tachograph as tg
from fakes.llm_server import FakeLLMServer
from tachograph.capture.vouch import UnvouchedToolCall, unvouched_calls, unvouched_in_stored
from tachograph.cli.app import cli
from tachograph.integrations.anthropic import instrument as instrument_anthropic
from tachograph.integrations.openai import instrument
from tachograph.providers.toolcalls import RequestedCall, requested_tool_calls
from tachograph.record.jsonl import export_run

PROMPT = "Please refund order B-2002, it arrived broken."
REFUNDS: list[dict[str, Any]] = []


@lc_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return json.dumps({"order_id": order_id, "status": "delivered", "total": 19.99})


@lc_tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    REFUNDS.append({"order_id": order_id, "amount": amount})
    return json.dumps({"refund_id": f"rf_{order_id}"})


def _recorded_lookup(order_id: str) -> str:
    """Look up an order."""
    return json.dumps({"order_id": order_id, "status": "delivered", "total": 19.99})


# The fix the report names: the same LangChain tools over @tachograph.tool functions.
RECORDED_TOOLS: dict[str, BaseTool] = {
    "lookup_order": lc_tool("lookup_order")(
        tg.tool(name="lookup_order", effect="read")(_recorded_lookup)
    ),
    "issue_refund": lc_tool("issue_refund")(
        tg.tool(name="issue_refund", effect="irreversible")(issue_refund.func)
    ),
}


@pytest.fixture(autouse=True)
def _refunds() -> Iterator[None]:
    REFUNDS.clear()
    yield
    REFUNDS.clear()


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def langgraph_style_agent(
    client: openai.OpenAI, tools: list[BaseTool], *, run: Callable[[str, dict[str, Any]], str]
) -> tg.Agent:
    """Call the model with the tools' schemas, run each tool call it asks for, until it
    answers (what ``create_react_agent`` does, without the graph)."""
    schemas = [convert_to_openai_tool(t) for t in tools]

    def agent(prompt: str) -> dict[str, Any]:
        messages: list[Any] = [{"role": "user", "content": prompt}]
        for _ in range(6):
            completion = client.chat.completions.create(
                model="gpt-5.6", messages=messages, tools=schemas
            )
            message = completion.choices[0].message
            if not message.tool_calls:
                return {"answer": message.content}
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                assert call.type == "function"
                output = run(call.function.name, json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise RuntimeError("the model never answered")

    return tg.Agent(fn=agent, name="refunds", code_version="refunds-1")


def _langchain(name: str, args: dict[str, Any]) -> str:
    by_name = {"lookup_order": lookup_order, "issue_refund": issue_refund}
    return str(by_name[name].invoke(args))


def _decorated(name: str, args: dict[str, Any]) -> str:
    return str(RECORDED_TOOLS[name].invoke(args))


def _record(agent: tg.Agent, db: Path, run_id: str) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tg.record_run(agent, PROMPT, store=db, run_id=run_id)
    return [w for w in caught if issubclass(w.category, UnvouchedToolCall)]


def test_undecorated_langchain_tools_are_flagged_and_never_reproduced(
    tmp_path: Path, srv: FakeLLMServer
) -> None:
    db = tmp_path / "runs.db"
    agent = langgraph_style_agent(
        instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test")),
        [lookup_order, issue_refund],
        run=_langchain,
    )
    flagged = _record(agent, db, "lg-1")
    assert len(REFUNDS) == 1
    # once per tool name, naming it and how to record it
    assert len(flagged) == 2
    texts = [str(w.message) for w in flagged]
    assert "'lookup_order'" in texts[0]
    assert "'issue_refund'" in texts[1]
    assert all("@tachograph.tool" in t for t in texts)

    with tg.open_store(db) as store:
        events = store.events("lg-1")
    types = [e.type for e in events]
    assert "tool.requested" not in types
    responses = [e.seq for e in events if e.type == "model.response"]
    finished = events[-1].payload or {}
    assert finished["status"] == "ok"
    assert finished["unvouched"] == [
        {
            "tool": "lookup_order",
            "seq": responses[0],
            "call_id": finished["unvouched"][0]["call_id"],
        },
        {
            "tool": "issue_refund",
            "seq": responses[1],
            "call_id": finished["unvouched"][1]["call_id"],
        },
    ]
    assert all(c["call_id"] for c in finished["unvouched"])
    assert tg.verify_events(events).ok
    assert [c.tool for c in unvouched_calls(events)] == ["lookup_order", "issue_refund"]

    hits = srv.request_count
    report = tg.replay(db, "lg-1", agent)
    assert srv.request_count == hits  # every model answer was served from the record
    assert not report.divergences  # each recorded step matched ...
    assert not report.reproduced  # ... and still it is not a reproduction
    assert report.verdict == "unvouched"
    assert [(c["tool"], c["seq"]) for c in report.unvouched] == [
        ("lookup_order", responses[0]),
        ("issue_refund", responses[1]),
    ]
    # what the record could not vouch for: the refund ran again during the replay
    assert len(REFUNDS) == 2
    text = report.render()
    assert "UNVOUCHED" in text.splitlines()[0]
    assert "'issue_refund' (asked at seq" in text
    assert "@tachograph.tool" in text
    data = report.to_dict()
    assert data["verdict"] == "unvouched"
    assert data["reproduced"] is False
    assert [c["tool"] for c in data["unvouched"]] == ["lookup_order", "issue_refund"]


def test_the_same_tools_recorded_reproduce_without_a_warning(
    tmp_path: Path, srv: FakeLLMServer
) -> None:
    db = tmp_path / "runs.db"
    agent = langgraph_style_agent(
        instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test")),
        list(RECORDED_TOOLS.values()),
        run=_decorated,
    )
    assert _record(agent, db, "lg-2") == []
    with tg.open_store(db) as store:
        events = store.events("lg-2")
    assert [e.payload["tool"] for e in events if e.type == "tool.requested"] == [
        "lookup_order",
        "issue_refund",
    ]
    assert "unvouched" not in (events[-1].payload or {})
    report = tg.replay(db, "lg-2", agent)
    assert report.reproduced, report.render()
    assert report.verdict == "reproduced"
    assert len(REFUNDS) == 1  # served, not run again


def test_show_and_verify_name_the_unvouched_calls(tmp_path: Path, srv: FakeLLMServer) -> None:
    db = tmp_path / "runs.db"
    agent = langgraph_style_agent(
        instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test")),
        [lookup_order, issue_refund],
        run=_langchain,
    )
    _record(agent, db, "lg-3")
    runner = CliRunner()
    shown = runner.invoke(cli, ["--store", str(db), "show", "lg-3"], catch_exceptions=False)
    assert shown.exit_code == 0
    assert "UNVOUCHED" in shown.output
    assert "'issue_refund' (asked at seq" in shown.output
    as_json = runner.invoke(cli, ["--store", str(db), "show", "lg-3", "--json"])
    assert [c["tool"] for c in json.loads(as_json.stdout)["unvouched"]] == [
        "lookup_order",
        "issue_refund",
    ]
    verified = runner.invoke(cli, ["--store", str(db), "verify", "lg-3"], catch_exceptions=False)
    assert verified.exit_code == 0  # the chain is intact: this is a warning, not a failure
    assert "UNVOUCHED" in verified.output
    assert "@tachograph.tool" in verified.output
    data = json.loads(runner.invoke(cli, ["--store", str(db), "verify", "lg-3", "--json"]).stdout)
    assert [c["tool"] for c in data["runs"][0]["unvouched"]] == ["lookup_order", "issue_refund"]
    # and from an export, without a store
    jsonl = tmp_path / "lg-3.jsonl"
    with tg.open_store(db) as store, jsonl.open("wb") as out:
        export_run(store, "lg-3", out)
    from_file = runner.invoke(cli, ["verify", str(jsonl)], catch_exceptions=False)
    assert "UNVOUCHED" in from_file.output


def test_plain_functions_over_responses_and_messages_are_flagged(
    tmp_path: Path, srv: FakeLLMServer
) -> None:
    db = tmp_path / "runs.db"
    client = instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test"))
    tool_def = {
        "type": "function",
        "name": "lookup_order",
        "description": "Look up an order.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    }

    def responses(prompt: str) -> Any:
        first = client.responses.create(model="gpt-5.6", input=prompt, tools=[tool_def])
        call = next(o for o in first.output if o.type == "function_call")
        out = _recorded_lookup(**json.loads(call.arguments))  # a plain function: unrecorded
        second = client.responses.create(
            model="gpt-5.6",
            input=[
                {"role": "user", "content": prompt},
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                },
                {"type": "function_call_output", "call_id": call.call_id, "output": out},
            ],
            tools=[tool_def],
        )
        return second.output_text

    flagged = _record(tg.Agent(fn=responses, name="r", code_version="1"), db, "resp-1")
    assert [("lookup_order" in str(w.message)) for w in flagged] == [True]
    report = tg.replay(db, "resp-1", tg.Agent(fn=responses, name="r", code_version="1"))
    assert report.verdict == "unvouched"
    assert [c["tool"] for c in report.unvouched] == ["lookup_order"]

    claude = instrument_anthropic(anthropic.Anthropic(base_url=srv.base_url, api_key="sk-test"))
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}

    def messages(prompt: str) -> Any:
        tools: Any = [{"name": "lookup_order", "description": "Look up.", "input_schema": schema}]
        first = claude.messages.create(
            model="claude-sonnet-5",
            max_tokens=200,
            messages=[{"role": "user", "content": prompt}],
            tools=tools,
        )
        use = next(b for b in first.content if b.type == "tool_use")
        return {"asked": use.name}

    flagged = _record(tg.Agent(fn=messages, name="m", code_version="1"), db, "msg-1")
    assert len(flagged) == 1
    assert "'lookup_order'" in str(flagged[0].message)
    report = tg.replay(db, "msg-1", tg.Agent(fn=messages, name="m", code_version="1"))
    assert report.verdict == "unvouched"


def test_the_wire_shapes_of_requested_tool_calls() -> None:
    chat = {
        "choices": [
            {
                "message": {
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "a", "arguments": "{}"},
                        }
                    ]
                }
            }
        ]
    }
    responses = {
        "output": [
            {"type": "function_call", "call_id": "c2", "name": "b"},
            {"type": "message", "content": []},
        ]
    }
    messages = {
        "content": [
            {"type": "text", "text": "x"},
            {"type": "tool_use", "id": "c3", "name": "c", "input": {}},
        ]
    }
    envelope = {"status": 200, "headers": {}, "body": chat}
    assert requested_tool_calls(chat) == (RequestedCall("a", "c1"),)
    assert requested_tool_calls(envelope) == (RequestedCall("a", "c1"),)
    assert requested_tool_calls(responses) == (RequestedCall("b", "c2"),)
    assert requested_tool_calls(messages) == (RequestedCall("c", "c3"),)
    assert requested_tool_calls({"choices": [{"message": {"content": "hi"}}]}) == ()
    assert requested_tool_calls("text") == ()
    assert requested_tool_calls({"choices": "garbage", "content": [1, None]}) == ()
    # Gemini (REST and the Python SDK's dump), Bedrock Converse, Ollama chat
    part = {"functionCall": {"name": "d", "id": "g"}}
    gemini = {"candidates": [{"content": {"parts": [part]}}]}
    assert requested_tool_calls(gemini) == (RequestedCall("d", "g"),)
    parts = [{"function_call": {"name": "d"}}, {"text": "x"}]
    sdk = {"candidates": [{"content": {"parts": parts}}]}
    assert requested_tool_calls(sdk) == (RequestedCall("d", None),)
    converse = {"output": {"message": {"content": [{"toolUse": {"name": "e", "toolUseId": "t"}}]}}}
    assert requested_tool_calls(converse) == (RequestedCall("e", "t"),)
    ollama = {"message": {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}}
    assert requested_tool_calls(ollama) == (RequestedCall("f", None),)
    assert requested_tool_calls({"candidates": [None, {"content": {"parts": "x"}}]}) == ()
    # Mappings that are not dicts (dict is only checked first, to spare the ABC check)
    shapes = [chat, envelope, responses, messages, gemini, sdk, converse, ollama]
    for shape in shapes:
        assert requested_tool_calls(_frozen(shape)) == requested_tool_calls(shape) != ()


def _frozen(value: Any) -> Any:
    """``value`` with every dict made a read-only mapping (a ``Mapping`` but no ``dict``)."""
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_frozen(v) for v in value]
    return value


def test_a_recorded_substitution_accounts_for_the_call() -> None:
    from tachograph.capture.vouch import ToolLedger

    asked = {"response": {"choices": [{"message": {"tool_calls": [{"name": "escalate"}]}}]}}
    ledger = ToolLedger()
    ledger.observe("model.response", asked, 3)
    ledger.observe("plan.selected", {"plan": "refund"}, 4)
    ledger.observe("tool.requested", {"tool": "issue_refund"}, 5)
    assert ledger.observe("model.request", {}, 7) == []
    # without the recorded choice, another tool does not account for it
    ledger.observe("model.response", asked, 8)
    ledger.observe("tool.requested", {"tool": "log_metrics"}, 9)
    assert [c.tool for c in ledger.observe("run.finished", {"status": "ok"}, 11)] == ["escalate"]


def test_a_run_without_model_answers_is_judged_by_its_run_finished_alone() -> None:
    # with no model.response the ledger finds nothing; what run.finished lists is still
    # reported, and one model.response opens a call to vouch for
    from types import SimpleNamespace as Ev

    listed = {"status": "ok", "unvouched": [{"tool": "escalate", "seq": 2, "call_id": None}]}
    tools_only = [
        Ev(type="run.started", payload={}, seq=0),
        Ev(type="tool.requested", payload={"tool": "lookup"}, seq=1),
        Ev(type="run.finished", payload=listed, seq=3),
    ]
    assert [(c.tool, c.seq) for c in unvouched_calls(tools_only)] == [("escalate", 2)]
    asked = {"response": {"choices": [{"message": {"tool_calls": [{"name": "refund"}]}}]}}
    with_answer = [
        Ev(type="run.started", payload={}, seq=0),
        Ev(type="model.response", payload=asked, seq=1),
        Ev(type="tool.requested", payload={"tool": "lookup"}, seq=2),
        Ev(type="run.finished", payload={"status": "ok"}, seq=3),
    ]
    assert [(c.tool, c.seq) for c in unvouched_calls(iter(with_answer))] == [("refund", 1)]


class _CountingLedger:
    """The ledger's accounting as it was written with a plain counter under its lock (the
    reference for the lock-free count of tool calls that match nothing open)."""

    def __init__(self) -> None:
        self.open: list[tuple[str, int]] = []
        self.other = 0
        self.decided = False
        self.unvouched: list[tuple[str, int]] = []

    def observe(self, type_: str, tool: str, seq: int) -> list[tuple[str, int]]:
        if type_ == "model.response":
            self.open.extend((t, seq) for t in tool.split(","))
        elif type_ == "tool.requested":
            for i, (t, _s) in enumerate(self.open):
                if t == tool:
                    del self.open[i]
                    break
            else:
                self.other += 1
        elif type_ in ("plan.selected", "decision"):
            self.decided = True
        elif type_ in ("model.request", "run.finished"):
            if self.decided and self.other:
                del self.open[: self.other]
            self.decided, self.other = False, 0
            left, self.open = self.open, []
            self.unvouched.extend(left)
            return left
        return []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["model.response", "tool.requested", "decision", "model.request", "tool.completed"]
            ),
            st.sampled_from(["a", "b", "a,b", "b,a,a"]),
        ),
        max_size=40,
    )
)
def test_the_ledger_counts_unmatched_tools_as_a_counter_under_its_lock_did(
    steps: list[tuple[str, str]],
) -> None:
    from tachograph.capture.vouch import ToolLedger

    ledger, reference = ToolLedger(), _CountingLedger()
    for seq, (type_, tool) in enumerate([*steps, ("run.finished", "")]):
        if type_ == "model.response":
            calls = [{"name": t} for t in tool.split(",")]
            payload: dict[str, Any] = {
                "response": {"choices": [{"message": {"tool_calls": calls}}]}
            }
        elif type_ == "run.finished":
            payload = {"status": "ok"}
        else:
            payload = {"tool": tool.split(",")[0]}
        got = ledger.observe(type_, payload, seq)
        asked = tool if type_ == "model.response" else tool.split(",")[0]
        want = reference.observe(type_, asked, seq)
        assert [(c.tool, c.seq) for c in got] == want
    assert [(c.tool, c.seq) for c in ledger.unvouched] == reference.unvouched


def _two_pass_unvouched(events: list[Any]) -> list[tuple[str, int]]:
    """``unvouched_calls`` as it was written before it streamed: the whole run held, the
    ledger walked only when a model answer exists (the reference for the one pass)."""
    from tachograph.capture.vouch import ToolLedger, UnvouchedCall

    ledger = ToolLedger()
    listed: list[UnvouchedCall] = []
    follow = "model.response" in [e.type for e in events]
    if not follow:
        events = [e for e in events if e.type == "run.finished"]
    for e in events:
        if e.payload is None:
            continue
        if follow:
            ledger.observe(e.type, e.payload, e.seq)
        if e.type == "run.finished":
            for item in e.payload.get("unvouched") or ():
                call = UnvouchedCall.from_dict(item) if isinstance(item, dict) else None
                if call is not None:
                    listed.append(call)
    seen = {(c.tool, c.seq) for c in ledger.unvouched}
    out = list(ledger.unvouched) + [c for c in listed if (c.tool, c.seq) not in seen]
    out.sort(key=lambda c: c.seq)
    return [(c.tool, c.seq) for c in out]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "model.response",
                    "tool.requested",
                    "decision",
                    "plan.selected",
                    "model.request",
                    "tool.completed",
                    "handoff",
                    "run.finished",
                ]
            ),
            st.sampled_from(["a", "b", "a,b", "transfer_to_x"]),
            st.booleans(),  # the payload erased
            st.booleans(),  # run.finished: aborted, and listing a call
        ),
        max_size=30,
    )
)
def test_one_streamed_pass_finds_what_the_two_pass_reading_found(
    steps: list[tuple[str, str, bool, bool]],
) -> None:
    from types import SimpleNamespace as Ev

    events = []
    for seq, (type_, tool, erased, flag) in enumerate(steps):
        payload: dict[str, Any] | None
        if type_ == "model.response":
            calls = [{"name": t} for t in tool.split(",")]
            payload = {"response": {"choices": [{"message": {"tool_calls": calls}}]}}
        elif type_ == "run.finished":
            payload = {"status": "aborted" if flag else "ok"}
            if flag:
                payload["unvouched"] = [{"tool": tool, "seq": max(0, seq - 1), "call_id": None}]
        else:
            payload = {"tool": tool.split(",")[0]}
        events.append(Ev(type=type_, payload=None if erased else payload, seq=seq))
    want = _two_pass_unvouched(list(events))
    assert [(c.tool, c.seq) for c in unvouched_calls(iter(events))] == want
    assert [(c.tool, c.seq) for c in unvouched_calls(events)] == want
    # read undecoded (as ``tacho verify RUN`` reads a stored run): the same calls
    stored = [
        Ev(
            type=e.type,
            payload=None,
            payload_bytes=None if e.payload is None else orjson.dumps(e.payload),
            seq=e.seq,
        )
        for e in events
    ]
    assert [(c.tool, c.seq) for c in unvouched_in_stored(iter(stored))] == want


def test_a_payload_that_is_not_json_is_passed_over_by_the_stored_reading() -> None:
    from types import SimpleNamespace as Ev

    asked = orjson.dumps(
        {"response": {"choices": [{"message": {"tool_calls": [{"name": "refund"}]}}]}}
    )
    events = [
        Ev(type="model.response", payload=None, payload_bytes=asked, seq=0),
        Ev(type="tool.requested", payload=None, payload_bytes=b"{not json", seq=1),
        Ev(type="run.finished", payload=None, payload_bytes=b'{"status":"ok"}', seq=2),
    ]
    assert [(c.tool, c.seq) for c in unvouched_in_stored(events)] == [("refund", 0)]
