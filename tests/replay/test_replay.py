"""Replay of the example shop agent: an unchanged agent reproduces; every kind of divergence
is reported at the right seq with what was expected, what came and the field-level changes;
nothing runs live."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from shop_agents import shop
from shop_agents.ledger import Ledger
from tachograph.replay.diff import MISSING

# Seqs of the recorded shop run (see SHOP_TYPES in tests/runtime/test_record.py).
GUARDRAIL, FIRST_REQUEST, LOOKUP_DONE, COMPUTE = 1, 4, 7, 9
REFUND, PRIORITY, FINISHED = 13, 16, 20


@pytest.fixture
def recorded(store: tg.SQLiteStore, ledger: Ledger) -> str:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="shop-1")
    shop.CALLS.clear()
    return "shop-1"


def nothing_ran(ledger: Ledger) -> None:
    assert sum(shop.CALLS.values()) == 0, shop.CALLS
    assert ledger.calls() == 2  # the note and the refund of the recording, nothing since


def test_an_unchanged_agent_reproduces(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    report = tg.replay(store, recorded, shop.build())
    assert report.reproduced
    assert report.verdict == "reproduced"
    assert not report.simulation
    assert report.drift == ()
    assert report.served == report.events == 21
    assert report.output == store.events(recorded)[-1].payload["output"]
    nothing_ran(ledger)
    assert "REPRODUCED (reproduction)" in report.render()
    assert report.to_dict()["kind"] == "reproduction"


def recorded_priority(store: tg.SQLiteStore, run_id: str) -> str:
    return str(store.events(run_id)[PRIORITY].payload["chosen"])


CASES: dict[str, tuple[shop.Variant, tg.DivergenceKind, int, str | None, str | None]] = {
    "type changed": (
        shop.Variant(check_stock_first=True),
        tg.DivergenceKind.TYPE_CHANGED,
        FIRST_REQUEST,
        "model.request",
        "tool.requested",
    ),
    "request changed": (
        shop.Variant(prompt="Be terse."),
        tg.DivergenceKind.REQUEST_CHANGED,
        FIRST_REQUEST,
        "model.request",
        "model.request",
    ),
    "args changed": (
        shop.Variant(refund_share=0.5),
        tg.DivergenceKind.ARGS_CHANGED,
        COMPUTE,
        "tool.requested",
        "tool.requested",
    ),
    "other tool chosen": (
        shop.Variant(refund_tool="issue_credit"),
        tg.DivergenceKind.TOOL_CHANGED,
        REFUND,
        "tool.requested",
        "tool.requested",
    ),
    "decision changed": (
        shop.Variant(priority="urgent"),
        tg.DivergenceKind.DECISION_CHANGED,
        PRIORITY,
        "decision",
        "decision",
    ),
    "guardrail now trips": (
        shop.Variant(guard_limit=5),
        tg.DivergenceKind.DECISION_CHANGED,
        GUARDRAIL,
        "guardrail.tripwire",
        "guardrail.tripwire",
    ),
    "extra call": (
        shop.Variant(extra_call_at_end=True),
        tg.DivergenceKind.EXTRA_CALL,
        FINISHED,
        None,
        "tool.requested",
    ),
    "finishes early": (
        shop.Variant(stop_after_plan=True),
        tg.DivergenceKind.MISSING_CALLS,
        COMPUTE,
        "tool.requested",
        "run.finished",
    ),
    "other output": (
        shop.Variant(sign_off="Bye"),
        tg.DivergenceKind.OUTPUT_CHANGED,
        FINISHED,
        "run.finished",
        "run.finished",
    ),
    "error instead of output": (
        shop.Variant(fail_at_end=True),
        tg.DivergenceKind.OUTPUT_CHANGED,
        FINISHED,
        "run.finished",
        "run.finished",
    ),
}


def expected_changes(name: str, store: tg.SQLiteStore, run_id: str) -> list[tuple[str, Any, Any]]:
    events = store.events(run_id)
    output = events[FINISHED].payload["output"]
    return {
        "type changed": [("$.type", "model.request", "tool.requested")],
        "request changed": [
            ("$.payload.request.messages[0].content", shop.SYSTEM, "Be terse."),
            (
                "$.payload.prompt_hash",
                events[FIRST_REQUEST].payload["prompt_hash"],
                tg.capture.runtime.prompt_hash({"system": "Be terse."}),
            ),
        ],
        "args changed": [("$.payload.args.share", 1.0, 0.5)],
        "other tool chosen": [("$.payload.tool", "issue_refund", "issue_credit")],
        "decision changed": [("$.payload.chosen", recorded_priority(store, run_id), "urgent")],
        "guardrail now trips": [("$.payload.blocked", False, True)],
        "extra call": [],
        "finishes early": [],
        "other output": [
            (
                "$.payload.output.reply",
                output["reply"],
                output["reply"].replace("Kind regards", "Bye"),
            )
        ],
        "error instead of output": [
            ("$.payload.status", "ok", "error"),
            ("$.payload.output", output, MISSING),
            (
                "$.payload.error",
                MISSING,
                {"type": "RuntimeError", "message": "the mail server is down"},
            ),
        ],
    }[name]


@pytest.mark.parametrize("name", list(CASES))
def test_each_divergence_is_reported_where_it_happens(
    name: str, store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    variant, kind, seq, expected_type, actual_type = CASES[name]
    report = tg.replay(store, recorded, shop.build(variant))
    assert not report.reproduced
    first = report.first
    assert first is not None
    assert (first.kind, first.seq) == (kind, seq), first.render()
    assert len(report.divergences) == 1  # the default stops at the first divergence
    if expected_type is None:
        assert first.expected is None
    else:
        assert first.expected is not None
        assert first.expected["type"] == expected_type
        assert first.expected["seq"] == seq
        assert first.expected["payload"] == store.events(recorded)[seq].payload
    assert first.actual is not None
    assert first.actual["type"] == actual_type
    changes = [(c.path, c.old, c.new) for c in first.changes]
    for change in expected_changes(name, store, recorded):
        assert change in changes, (change, changes)
    if name == "request changed":
        assert len(changes) == 2
    nothing_ran(ledger)
    assert f"seq {seq}: {kind.value}" in report.render()
    assert report.to_dict()["first_divergence"]["kind"] == kind.value


def test_raise_or_collect(store: tg.SQLiteStore, recorded: str, ledger: Ledger) -> None:
    twice = shop.build(shop.Variant(priority="urgent", sign_off="Bye"))
    with pytest.raises(tg.Divergence) as info:
        tg.replay(store, recorded, twice, raise_on_divergence=True)
    assert info.value.seq == PRIORITY
    assert info.value.report.first.kind is tg.DivergenceKind.DECISION_CHANGED
    assert "decision_changed" in str(info.value)

    stopped = tg.replay(store, recorded, twice)
    assert [d.seq for d in stopped.divergences] == [PRIORITY]

    collected = tg.replay(store, recorded, twice, collect=True)
    assert [(d.kind, d.seq) for d in collected.divergences] == [
        (tg.DivergenceKind.DECISION_CHANGED, PRIORITY),
        (tg.DivergenceKind.OUTPUT_CHANGED, FINISHED),
    ]
    assert not collected.aborted
    nothing_ran(ledger)


def test_collect_goes_on_after_changed_arguments(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    # compute_refund gets other arguments; the recorded result is served, so the agent pays
    # the recorded amount and everything after matches again
    report = tg.replay(store, recorded, shop.build(shop.Variant(refund_share=0.5)), collect=True)
    assert [(d.kind, d.seq) for d in report.divergences] == [
        (tg.DivergenceKind.ARGS_CHANGED, COMPUTE)
    ]
    assert report.served == report.events
    nothing_ran(ledger)


def test_collect_after_a_type_change_reports_it_once(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    # the guardrail at seq 1 is gone: the clock read comes where the guardrail was
    report = tg.replay(store, recorded, shop.build(shop.Variant(skip_guardrail=True)), collect=True)
    assert [(d.kind, d.seq) for d in report.divergences] == [
        (tg.DivergenceKind.TYPE_CHANGED, GUARDRAIL)
    ]
    assert report.first is not None
    assert report.first.actual is not None
    assert report.first.actual["type"] == "clock.read"
    # replay resynchronised on the clock read and served everything after it
    assert not report.aborted
    assert report.output == store.events(recorded)[FINISHED].payload["output"]
    nothing_ran(ledger)


def test_collect_stops_when_a_call_has_no_counterpart(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    report = tg.replay(
        store, recorded, shop.build(shop.Variant(check_stock_first=True)), collect=True
    )
    assert report.first is not None
    assert report.first.kind is tg.DivergenceKind.TYPE_CHANGED
    # check_stock has no recorded counterpart: nothing can be served to it, so replay stops
    assert report.aborted
    assert len(report.divergences) == 1
    nothing_ran(ledger)


def test_a_tool_changed_in_collect_mode_stops(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    report = tg.replay(
        store, recorded, shop.build(shop.Variant(refund_tool="issue_credit")), collect=True
    )
    assert [(d.kind, d.seq) for d in report.divergences] == [
        (tg.DivergenceKind.TOOL_CHANGED, REFUND)
    ]
    assert report.aborted  # the refund's answer is not served as the credit's
    nothing_ran(ledger)


# -- runs that cannot be replayed ---------------------------------------------------------------


def raw(path: Path, sql: str, *args: Any) -> None:
    db = sqlite3.connect(path)
    try:
        db.execute(sql, args)
        db.commit()
    finally:
        db.close()


def erase(path: Path, run_id: str, seq: int) -> None:
    """Erase a payload the way retention does: body and salt to NULL (the triggers allow it)."""
    raw(
        path,
        "UPDATE payloads SET body=NULL, salt=NULL WHERE id="
        "(SELECT id FROM events WHERE run_id=? AND seq=?)",
        run_id,
        seq,
    )


def test_a_run_that_does_not_verify_is_refused_unless_allowed(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    # whoever holds the file rewrites the order's price
    raw(Path(store.path), "DROP TRIGGER payloads_erase_only")
    body = store.raw_payload(store.events(recorded)[LOOKUP_DONE].event_id)
    assert body is not None
    assert b'"price_cents":2500' in body
    raw(
        Path(store.path),
        "UPDATE payloads SET body=? WHERE id=(SELECT id FROM events WHERE run_id=? AND seq=?)",
        body.replace(b'"price_cents":2500', b'"price_cents":250'),
        recorded,
        LOOKUP_DONE,
    )
    with pytest.raises(tg.Unreplayable) as info:
        tg.replay(store, recorded, shop.build())
    assert info.value.seq == LOOKUP_DONE
    assert "allow_unverified" in str(info.value)

    report = tg.replay(store, recorded, shop.build(), allow_unverified=True, collect=True)
    assert report.unverified
    assert report.simulation
    assert "WARNING: the run did not verify" in report.render()
    assert report.to_dict()["unverified"] is True
    # the tampered price flows into the agent's next call
    assert report.first is not None
    assert report.first.seq == COMPUTE
    assert ("$.payload.args.price_cents", 2500, 250) in [
        (c.path, c.old, c.new) for c in report.first.changes
    ]
    nothing_ran(ledger)


def test_a_file_that_does_not_verify_is_refused_unless_allowed(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger, tmp_path: Path
) -> None:
    """As a stored run: a file whose bytes were edited replays only on request, labelled."""
    from tachograph.record.jsonl import export_run
    from tachograph.replay.history import RunHistory

    path = tmp_path / "run.jsonl"
    with path.open("wb") as out:
        export_run(store, recorded, out)
    lines = path.read_bytes().splitlines(keepends=True)
    assert b'"price_cents":2500' in lines[LOOKUP_DONE]
    lines[LOOKUP_DONE] = lines[LOOKUP_DONE].replace(b'"price_cents":2500', b'"price_cents":250')
    path.write_bytes(b"".join(lines))
    with pytest.raises(tg.VerificationFailed):
        RunHistory.from_jsonl(path)
    history = RunHistory.from_jsonl(path, allow_unverified=True)
    assert not history.report.ok
    with pytest.raises(tg.Unreplayable, match="allow_unverified"):
        tg.replay(history, None, shop.build())
    report = tg.replay(history, None, shop.build(), allow_unverified=True, collect=True)
    assert report.unverified
    assert report.simulation
    assert report.first is not None
    assert report.first.seq == COMPUTE  # the edited price flows into the agent's next call
    nothing_ran(ledger)


@pytest.mark.parametrize("seq", [LOOKUP_DONE, PRIORITY, FIRST_REQUEST])
def test_erased_steps_are_unreplayable_by_seq(
    seq: int, store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    erase(Path(store.path), recorded, seq)
    assert store.verify(recorded).ok  # erasure is reported, not a failure
    report = tg.replay(store, recorded, shop.build())
    assert report.erased == (seq,)
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tg.DivergenceKind.UNREPLAYABLE, seq)
    assert report.aborted
    assert not report.reproduced
    assert "erased" in report.first.explanation
    assert f"erased payloads at seq {seq}" in report.render()
    nothing_ran(ledger)


def test_an_erased_end_cannot_be_compared(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    erase(Path(store.path), recorded, FINISHED)
    report = tg.replay(store, recorded, shop.build(), collect=True)
    assert [(d.kind, d.seq) for d in report.divergences] == [
        (tg.DivergenceKind.UNREPLAYABLE, FINISHED)
    ]


def test_an_erased_input_gives_a_report_not_an_exception(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    erase(Path(store.path), recorded, 0)
    report = tg.replay(store, recorded, shop.build())
    assert report.verdict == "unreplayable"
    assert not report.reproduced
    assert [s["seq"] for s in report.unreplayable] == [0]
    assert "input" in report.unreplayable[0]["reason"]
    assert "UNREPLAYABLE" in report.render()
    assert report.to_dict()["unreplayable"][0]["type"] == "run.started"
    nothing_ran(ledger)


def test_bad_match_mode_fails_loudly(store: tg.SQLiteStore, recorded: str) -> None:
    with pytest.raises(tg.ReplayError, match="expected one of 'strict', 'key'"):
        tg.replay(store, recorded, shop.build(), match="fuzzy")


def test_a_crashed_run_replays_up_to_the_crash(
    tmp_path: Path, store: tg.SQLiteStore, ledger: Ledger
) -> None:
    from shop_agents.fixtures import run_child

    db = tmp_path / "crash.db"
    run_child(db, "crashed", hang_in="issue_refund", books=tmp_path / "b.db", tmp_path=tmp_path)
    report = tg.replay(tg.SQLiteStore(db), "crashed", shop.build())
    assert report.first is not None
    assert (report.first.kind, report.first.seq) == (tg.DivergenceKind.UNREPLAYABLE, REFUND)
    assert "resume" in report.first.explanation
    assert "never finished" in report.render()
    assert sum(shop.CALLS.values()) == 0
    assert ledger.calls() == 0


def test_external_reads_are_served_without_fetching(store: tg.SQLiteStore) -> None:
    fetched: list[str] = []

    def price() -> int:
        fetched.append("sync")
        return 1999

    async def stock() -> dict[str, int]:
        fetched.append("async")
        return {"A-1": 3}

    @tg.agent(name="pricing")
    async def pricing(task: str) -> Any:
        p = tg.external("prices", price, key=task)
        s = await tg.capture.runtime.aexternal("stock", stock)
        return {
            "price": p,
            "stock": s[task],
            "at": tg.now().isoformat(),
            "n": tg.rng().randint(0, 99),
        }

    recorded = asyncio.run(tg.arecord_run(pricing, "A-1", store=store, run_id="px"))
    assert fetched == ["sync", "async"]
    events = store.events("px")
    assert [e.type for e in events[1:-1]] == [
        "external.read",
        "external.read",
        "clock.read",
        "random.seed",
    ]
    assert events[1].payload == {"source": "prices", "key": "A-1", "value": 1999}
    report = tg.replay(store, "px", pricing)
    assert report.reproduced
    assert report.output == recorded.output  # the same clock reading and random draw
    assert fetched == ["sync", "async"]  # nothing fetched again

    @tg.agent(name="pricing")
    async def other_source(task: str) -> Any:
        tg.external("prices-v2", price, key=task)
        return None

    changed = tg.replay(store, "px", other_source)
    assert changed.first is not None
    assert (changed.first.kind, changed.first.seq) == (tg.DivergenceKind.DECISION_CHANGED, 1)
    assert [(c.path, c.old, c.new) for c in changed.first.changes] == [
        ("$.payload.source", "prices", "prices-v2")
    ]
