"""``@tachograph.agent(tools=[...])`` takes framework tool objects, fingerprinted by schema;
``tachograph.guardrail(..., passed=True)`` records ``guardrail.passed``."""

from __future__ import annotations

from typing import Any

import agents
import pytest

import tachograph


def _env_tools(tools: list[Any]) -> dict[str, Any]:
    declared = tachograph.agent(name="a", tools=tools, code_version="1")(lambda _: None)
    return dict(declared.fingerprint()["tools"])


def test_an_agents_sdk_function_tool_is_fingerprinted_by_name_and_schema() -> None:
    @agents.function_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return order_id

    @agents.function_tool(name_override="lookup_order")
    def lookup_order_v2(order_id: str, verbose: bool) -> str:
        """Look up an order."""
        return order_id

    first = _env_tools([lookup_order])
    assert list(first) == ["lookup_order"]
    assert first["lookup_order"]["schema"].startswith("sha256:")
    assert _env_tools([lookup_order]) == first  # stable
    # A new parameter is a new schema: the fingerprint says the tool changed.
    assert _env_tools([lookup_order_v2])["lookup_order"] != first["lookup_order"]


def test_a_langchain_tool_is_fingerprinted_by_name_and_schema() -> None:
    lc_tools = pytest.importorskip("langchain_core.tools")

    @lc_tools.tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return order_id

    @lc_tools.tool("lookup_order")
    def other(order_id: int) -> str:
        """Look up an order."""
        return str(order_id)

    first = _env_tools([lookup_order])
    assert list(first) == ["lookup_order"]
    assert _env_tools([other])["lookup_order"] != first["lookup_order"]


def test_anything_else_is_still_refused_with_the_hint() -> None:
    with pytest.raises(tachograph.RecordingError, match=r"@tachograph\.tool"):
        _env_tools([print])


def test_guardrail_passed_and_tripwire_are_recorded_with_their_exact_types(tmp_path: Any) -> None:
    db = str(tmp_path / "runs.db")

    def agent(_: Any) -> str:
        tachograph.guardrail("pii", stage="input", passed=True, reason="no PII found")
        tachograph.guardrail("length", stage="output", blocked=False, reason="long")
        return "ok"

    result = tachograph.record_run(agent, None, store=db)
    recorded = tachograph.open_store(db).events(result.run_id)
    assert [(e.type, e.payload) for e in recorded[1:3]] == [
        ("guardrail.passed", {"guardrail": "pii", "stage": "input", "reason": "no PII found"}),
        (
            "guardrail.tripwire",
            {"guardrail": "length", "stage": "output", "blocked": False, "reason": "long"},
        ),
    ]
    with pytest.raises(tachograph.RecordingError, match="blocked nothing"):
        tachograph.guardrail("x", stage="input", passed=True, blocked=True)
    with pytest.raises(tachograph.RecordingError, match="blocked=True or False"):
        tachograph.guardrail("x", stage="input")
