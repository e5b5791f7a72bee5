"""Dry-run tools, and live re-execution of pure tools during replay.

The shop's ledger is a payments/notes fake that counts every real call and deduplicates by
idempotency key: it shows exactly what reached the world.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tachograph as tg
from shop_agents import shop
from shop_agents.fixtures import run_child
from shop_agents.ledger import Ledger

NOTE_DONE, REFUND_DONE, COMPUTE_DONE = 12, 14, 10


def completions(store: tg.SQLiteStore, run_id: str) -> dict[str, tg.Event]:
    return {e.payload["tool"]: e for e in store.events(run_id) if e.type == "tool.completed"}


def assert_recorded_dry(store: tg.SQLiteStore, run_id: str) -> None:
    done = completions(store, run_id)
    assert store.events(run_id)[0].payload["labels"]["tachograph.dry_run"] == "true"
    # the tool's own dry_run function synthesized the note
    assert done["post_note"].payload == {
        "tool": "post_note",
        "result": {
            "note_id": "preview",
            "order_id": "A-1",
            "text": done["post_note"].payload["result"]["text"],
        },
        "dry_run": True,
    }
    # issue_refund has none: a result is synthesized, and says so
    assert done["issue_refund"].payload["dry_run"] is True
    assert done["issue_refund"].payload["result"] == {
        "dry_run": True,
        "status": "simulated",
        "tool": "issue_refund",
        "idempotency_key": f"{run_id}:issue_refund:A-1",
    }
    # reads and pure tools are not effects: they ran, and are not marked
    assert "dry_run" not in done["lookup_order"].payload
    assert "dry_run" not in done["compute_refund"].payload
    assert shop.CALLS["lookup_order"] == 1
    assert shop.CALLS["compute_refund"] == 1
    assert shop.CALLS["post_note"] == 0
    assert shop.CALLS["issue_refund"] == 0
    assert store.verify(run_id).ok


def test_dry_run_argument(store: tg.SQLiteStore, ledger: Ledger) -> None:
    result = tg.record_run(shop.build(), shop.TASK, store=store, run_id="dry", dry_run=True)
    assert_recorded_dry(store, "dry")
    assert ledger.calls() == 0
    assert result.output["note"] == "preview"
    assert result.output["refund"] is None
    state = tg.fold(store.events("dry"))
    assert state.dry_run_results == [NOTE_DONE, REFUND_DONE]


def test_the_environment_switch_forces_dry_run(
    store: tg.SQLiteStore, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TACHOGRAPH_DRY_RUN", "1")
    # a process-wide safety switch: an argument cannot turn it off
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="env", dry_run=False)
    assert_recorded_dry(store, "env")
    assert ledger.calls() == 0


def test_a_live_run_is_not_labelled(store: tg.SQLiteStore, ledger: Ledger) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="live")
    assert "labels" not in store.events("live")[0].payload
    assert not any("dry_run" in e.payload for e in completions(store, "live").values())
    assert ledger.calls() == 2


def test_replay_and_fork_never_call_the_payments_api(store: tg.SQLiteStore, ledger: Ledger) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="r")
    assert ledger.calls() == 2
    assert tg.replay(store, "r", shop.build()).reproduced
    assert tg.replay(store, "r", shop.build(shop.Variant(sign_off="x")), collect=True)
    fork = tg.fork(store, "r", 8, shop.build())
    assert completions(store, fork.new_run_id or "")["issue_refund"].payload["dry_run"] is True
    assert ledger.calls() == 2  # the recording's two calls, nothing since


def test_replay_says_when_the_recording_holds_simulated_results(
    store: tg.SQLiteStore, ledger: Ledger
) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="dry", dry_run=True)
    report = tg.replay(store, "dry", shop.build())
    assert report.reproduced
    assert any(f"seq {NOTE_DONE}, {REFUND_DONE}" in n for n in report.notes)


def test_a_dry_run_result_is_never_taken_for_a_real_one_by_a_fork(
    store: tg.SQLiteStore, ledger: Ledger
) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="dry", dry_run=True)
    # fork after the simulated note, asking for live tools: the refund still is not real,
    # since the agent now acts on a note that was never written
    report = tg.fork(store, "dry", NOTE_DONE, shop.build(), dry_run=False)
    child = store.events(report.new_run_id or "")
    assert (
        "labels" not in child[0].payload or "tachograph.dry_run" not in child[0].payload["labels"]
    )
    assert completions(store, report.new_run_id or "")["issue_refund"].payload["dry_run"] is True
    assert ledger.calls() == 0
    assert any(f"seq {NOTE_DONE} holds a dry-run result" in n for n in report.notes)


def test_a_run_recorded_in_dry_run_resumes_in_dry_run(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, books = tmp_path / "crash.db", tmp_path / "books.db"
    run_child(
        db,
        "dry-crash",
        hang_in="lookup_order",
        books=books,
        tmp_path=tmp_path,
        # in dry run no intent forces a flush: "every" puts the steps before the read on disk
        extra_env={"TACHOGRAPH_DRY_RUN": "1", "SHOP_DURABILITY": "every"},
    )
    store = tg.SQLiteStore(db, create=False)
    assert store.events("dry-crash")[0].payload["labels"]["tachograph.dry_run"] == "true"
    ledger_file = Ledger(str(books))
    monkeypatch.setattr(shop, "LEDGER", ledger_file)
    report = tg.resume(store, "dry-crash", shop.build(), confirm=True)
    assert report.reproduced
    done = completions(store, "dry-crash")
    assert done["post_note"].payload["dry_run"] is True
    assert done["issue_refund"].payload["dry_run"] is True
    assert "dry_run" not in done["lookup_order"].payload  # a read: it ran again, for real
    assert ledger_file.calls() == 0
    assert store.verify("dry-crash").ok


def test_an_unconfirmed_resume_calls_nothing_and_a_confirmed_one_calls_once(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, books = tmp_path / "crash.db", tmp_path / "books.db"
    run_child(db, "w", hang_in="post_note", books=books, tmp_path=tmp_path)
    ledger_file = Ledger(str(books))
    monkeypatch.setattr(shop, "LEDGER", ledger_file)
    key = tg.SQLiteStore(db).events("w")[-1].idempotency_key
    assert ledger_file.keys("note") == [key]  # the child's call, before it was killed

    # the same crashed run, resumed two ways: copy the database with its write-ahead log
    copy = tmp_path / "copy.db"
    for suffix in ("", "-wal"):
        source = Path(f"{db}{suffix}")
        if source.exists():
            Path(f"{copy}{suffix}").write_bytes(source.read_bytes())
    tg.resume(tg.SQLiteStore(copy), "w", shop.build())
    assert ledger_file.calls() == 1  # unconfirmed: nothing more reached the world

    tg.resume(tg.SQLiteStore(db), "w", shop.build(), confirm=True)
    assert ledger_file.keys("note") == [key, key]
    assert len(ledger_file.applied("note")) == 1  # the API deduplicated by the original key
    assert len(ledger_file.applied("refund")) == 1


# -- pure tools re-executed -----------------------------------------------------------------------


def test_a_changed_pure_tool_is_caught_with_rerun_pure(
    store: tg.SQLiteStore, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="p")
    shop.CALLS.clear()
    assert tg.replay(store, "p", shop.build(), rerun_pure=True).reproduced
    assert shop.CALLS == {"compute_refund": 1}  # the pure tool ran; nothing else did

    monkeypatch.setattr(shop, "TAX_PERCENT", 10)  # its implementation changes
    ignored = tg.replay(store, "p", shop.build())
    assert ignored.reproduced

    report = tg.replay(store, "p", shop.build(), rerun_pure=True)
    first = report.first
    assert first is not None
    assert (first.kind, first.seq) == (tg.DivergenceKind.TOOL_IMPLEMENTATION_CHANGED, COMPUTE_DONE)
    assert [(c.path, c.old, c.new) for c in first.changes] == [
        ("$.payload.result.tax_cents", 0, 250)
    ]
    assert first.actual == {
        "type": "tool.completed",
        "payload": {"tool": "compute_refund", "result": {"amount_cents": 2500, "tax_cents": 250}},
    }
    assert "implementation" in first.explanation
    assert ledger.calls() == 2
