"""One-line summaries for the timeline, over real events of each known shape."""

from __future__ import annotations

from typing import Any

import pytest

from tachograph.cli.render import is_dry_run, summarize, type_style
from tachograph.record.event import Event, new_event


def _event(type: str, payload: dict[str, Any]) -> Event:
    return new_event(
        run_id="run_x", seq=1, type=type, actor="a", payload=payload, prev_hash="sha256:" + "0" * 64
    )


OPENAI_CHAT = {
    "choices": [
        {"message": {"role": "assistant", "tool_calls": [{"function": {"name": "get_weather"}}]}}
    ],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
}
ANTHROPIC = {
    "content": [{"type": "text", "text": "Checking."}, {"type": "tool_use", "name": "lookup"}],
    "usage": {"input_tokens": 7, "output_tokens": 3},
}
RESPONSES = {
    "output": [{"type": "message", "content": [{"type": "output_text", "text": "Hi there"}]}]
}


@pytest.mark.parametrize(
    ("type", "payload", "expected"),
    [
        ("model.response", {"response": OPENAI_CHAT}, "calls get_weather  [15 tokens]"),
        ("model.response", {"response": ANTHROPIC}, "calls lookup  [10 tokens]"),
        ("model.response", {"response": RESPONSES}, "Hi there"),
        (
            "model.response",
            {"response": {"status": 200, "headers": {}, "body": ANTHROPIC}, "usage": None},
            "calls lookup  [10 tokens]",
        ),
        (
            "model.response",
            {"response": {"status": 200, "headers": {}, "events": [{"data": "{}"}] * 3}},
            "HTTP 200, a stream of 3 events",
        ),
        (
            "model.request",
            {"request": {"messages": [{"role": "user", "content": "Weather in Lyon?"}]}},
            "user: Weather in Lyon?",
        ),
        (
            "tool.requested",
            {"tool": "pay", "args": {"n": 42}, "effect": "irreversible"},
            "pay(n=42)  [irreversible]",
        ),
        ("tool.failed", {"tool": "pay", "error": {"type": "KeyError", "message": "x"}}, "pay: "),
        ("guardrail.tripwire", {"guardrail": "pii", "stage": "output", "blocked": True}, "BLOCKED"),
        (
            "guardrail.tripwire",
            {"guardrail": "pii", "stage": "output", "blocked": False, "reason": "an e-mail"},
            "pii (output): flagged  (an e-mail)",
        ),
        ("guardrail.passed", {"guardrail": "pii", "stage": "input"}, "pii (input): passed"),
        ("handoff", {"from": "triage", "to": "billing"}, "triage -> billing"),
        ("decision", {"name": "tier", "chosen": "gold"}, "tier = gold"),
        ("external.read", {"source": "fx", "key": "EUR", "value": 1.1}, "fx[EUR] = 1.1"),
        ("run.finished", {"status": "error", "error": {"type": "E", "message": "m"}}, "error: E"),
        ("acme.review.queued", {"ticket": "T-1"}, '{"ticket":"T-1"}'),
    ],
)
def test_summaries(type: str, payload: dict[str, Any], expected: str) -> None:
    assert expected in summarize(_event(type, payload))


def test_a_long_value_is_cut_to_one_line() -> None:
    text = summarize(_event("tool.completed", {"tool": "t", "result": "line\n" * 100}))
    assert "\n" not in text
    assert text.endswith("...")
    assert len(text) < 100


def test_dry_run_marks_and_styles() -> None:
    assert is_dry_run(_event("tool.completed", {"tool": "t", "result": 1, "dry_run": True}))
    assert not is_dry_run(_event("tool.completed", {"tool": "t", "result": 1}))
    started = {"input": None, "env": {}, "labels": {"tachograph.dry_run": "true"}}
    assert is_dry_run(_event("run.started", started))
    assert type_style("tool.failed") == "bold red"
    assert type_style("model.request") != type_style("tool.requested")
