"""The seed scenario, end to end, with the demo billing agent: record a refund, then replay
the agent as it was, with a changed prompt, a changed refund amount and a changed model."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

import tachograph as tg
from tachograph.demo import agent as demo

TASK = "Hello, my order A-4471 arrived damaged. Please refund it."
FIRST_REQUEST, REFUND_REQUESTED = 2, 9


@pytest.fixture
def refund_run(store: tg.SQLiteStore) -> str:
    before = demo.PAYMENTS.calls
    result = tg.record_run(demo.billing_agent, TASK, store=store, run_id="refund-1")
    assert result.output == "Refund of 25.00 EUR issued for A-4471."
    assert demo.PAYMENTS.calls == before + 1
    return "refund-1"


@pytest.fixture
def payments_untouched() -> Iterator[None]:
    before = demo.PAYMENTS.calls
    yield
    assert demo.PAYMENTS.calls == before, "replay called the payments API"


def test_the_recorded_refund(store: tg.SQLiteStore, refund_run: str) -> None:
    events = store.events(refund_run)
    assert store.verify(refund_run).ok
    refund = events[REFUND_REQUESTED]
    assert refund.type == "tool.requested"
    assert refund.payload["args"] == {"order_id": "A-4471", "amount_cents": 2500}
    assert refund.idempotency_key == "refund-1:issue_refund:A-4471"


def test_the_unchanged_agent_reproduces(
    store: tg.SQLiteStore, refund_run: str, payments_untouched: None
) -> None:
    report = tg.replay(store, refund_run, demo.billing_agent)
    assert report.reproduced
    assert not report.simulation
    assert report.output == "Refund of 25.00 EUR issued for A-4471."


def test_a_changed_refund_amount_is_caught_at_the_refund(
    store: tg.SQLiteStore, refund_run: str, payments_untouched: None
) -> None:
    report = tg.replay(store, refund_run, demo.billing_agent_v2)
    first = report.first
    assert first is not None
    assert (first.kind, first.seq) == (tg.DivergenceKind.ARGS_CHANGED, REFUND_REQUESTED)
    assert [(c.path, c.old, c.new) for c in first.changes] == [
        ("$.payload.args.amount_cents", 2500, 1250)
    ]
    assert first.expected is not None
    assert first.expected["payload"]["tool"] == "issue_refund"
    assert [d.field for d in report.drift] == ["code_version"]  # demo-1 -> demo-2
    assert report.simulation


def test_a_changed_prompt_is_caught_at_the_first_request(
    store: tg.SQLiteStore,
    refund_run: str,
    payments_untouched: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new_prompt = demo.SYSTEM + " Always escalate."
    monkeypatch.setattr(demo, "SYSTEM", new_prompt)
    report = tg.replay(store, refund_run, demo.billing_agent)
    first = report.first
    assert first is not None
    assert (first.kind, first.seq) == (tg.DivergenceKind.REQUEST_CHANGED, FIRST_REQUEST)
    paths = {c.path: (c.old, c.new) for c in first.changes}
    assert paths["$.payload.request.messages[0].content"][1] == new_prompt
    assert paths["$.payload.prompt_hash"][1] == tg.capture.runtime.sha256_text(new_prompt)


def test_a_changed_model_is_labelled_a_simulation(
    store: tg.SQLiteStore, refund_run: str, payments_untouched: None
) -> None:
    newer = dataclasses.replace(demo.billing_agent, models=("demo-scripted-2026-12-01",))
    report = tg.replay(store, refund_run, newer)
    assert report.reproduced  # the agent did the same things...
    assert report.simulation  # ...but not against the same environment
    assert [(d.field, d.recorded, d.current) for d in report.drift] == [
        ("models", [demo.MODEL], ["demo-scripted-2026-12-01"])
    ]
    assert "REPRODUCED (simulation)" in report.render()
    assert report.to_dict()["kind"] == "simulation"


def test_diff_runs_finds_the_first_differing_step(store: tg.SQLiteStore, refund_run: str) -> None:
    tg.record_run(demo.billing_agent_v2, TASK, store=store, run_id="refund-2")
    tg.record_run(demo.billing_agent, TASK, store=store, run_id="refund-3")
    same = tg.diff_runs(store.events(refund_run), store.events(refund_run))
    assert same.same
    assert same.seq is None
    assert same.events_a == same.events_b == 15
    # the same agent twice: the steps match (keys compared without their run id) until the
    # payments API answers with another refund id
    again = tg.diff_runs(store.events(refund_run), store.events("refund-3"))
    assert again.seq == REFUND_REQUESTED + 1
    assert [c.path for c in again.changes] == ["$.payload.result.refund_id"]
    diff = tg.diff_runs(
        store.events(refund_run), store.events("refund-2"), names=(refund_run, "refund-2")
    )
    assert diff.seq == REFUND_REQUESTED
    assert diff.event_a is not None
    assert diff.event_a.type == "tool.requested"
    assert [(c.path, c.old, c.new) for c in diff.changes] == [
        ("$.payload.args.amount_cents", 2500, 1250)
    ]
    assert "first difference at seq 9" in diff.render()


def test_a_fork_at_a_read_tools_step_runs_the_read_live(
    store: tg.SQLiteStore, refund_run: str, payments_untouched: None
) -> None:
    # seq 4 is the lookup_order request (a read): the fork goes live there, and a read runs
    # for real (only writes and irreversible tools are simulated), so the agent finishes
    lookup = store.events(refund_run)[4]
    assert (lookup.type, lookup.payload["tool"]) == ("tool.requested", "lookup_order")
    report = tg.fork(store, refund_run, 4, demo.billing_agent)
    assert report.new_run_id is not None
    forked = store.events(report.new_run_id)
    read = next(
        e for e in forked if e.type == "tool.completed" and e.payload["tool"] == "lookup_order"
    )
    assert "dry_run" not in read.payload
    assert read.payload["result"]["order_id"] == "A-4471"
    refund = next(
        e for e in forked if e.type == "tool.completed" and e.payload["tool"] == "issue_refund"
    )
    assert refund.payload.get("dry_run") is True  # the irreversible refund stays simulated
    assert forked[-1].type == "run.finished"
    assert forked[-1].payload["status"] == "ok"


def test_an_error_in_the_demo_agent_names_the_demo_agents_frame() -> None:
    from tachograph.replay.api import raised_at

    def fail() -> None:
        demo_globals = {"__name__": "tachograph.demo.agent"}
        exec(compile("def boom():\n    raise KeyError('x')\n", demo.__file__, "exec"), demo_globals)
        demo_globals["boom"]()

    try:
        fail()
    except KeyError as exc:
        where = raised_at(exc)
    assert where is not None
    assert where.startswith(demo.__file__ + ":")
