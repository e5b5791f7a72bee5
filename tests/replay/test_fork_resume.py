"""Fork ("what if the model had answered this") and resume after a real crash, on real
SQLite files; the payments/notes ledger shows what reached the world."""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

import tachograph as tg
from shop_agents import shop
from shop_agents.fixtures import run_child
from shop_agents.ledger import Ledger
from tachograph.replay.diff import MISSING

FIRST_RESPONSE, NOTE_REQUESTED, REFUND_REQUESTED, FINISHED = 5, 11, 13, 20


@pytest.fixture
def recorded(store: tg.SQLiteStore, ledger: Ledger) -> str:
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="shop-1")
    shop.CALLS.clear()
    return "shop-1"


def other_order_answer(order_id: str) -> dict[str, Any]:
    return {
        "id": "resp-override",
        "model": shop.MODEL_BUILD,
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "tool_calls": [{"name": "lookup_order", "args": {"order_id": order_id}}],
                }
            }
        ],
    }


def test_fork_with_an_override_records_a_child_run(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    report = tg.fork(
        store,
        recorded,
        FIRST_RESPONSE,
        shop.build(),
        override=other_order_answer("B-2"),
        new_run_id="shop-1.what-if",
    )
    assert report.mode == "fork"
    assert report.new_run_id == "shop-1.what-if"
    parent, child = store.events(recorded), store.events("shop-1.what-if")
    assert store.verify("shop-1.what-if").ok
    started = child[0].payload
    assert started["parent"] == {"run_id": recorded, "seq": FIRST_RESPONSE}
    assert started["labels"]["tachograph.fork_of"] == recorded
    assert started["labels"]["tachograph.dry_run"] == "true"
    # steps 1..4 are copied as served, re-keyed to the child run
    for a, b in zip(parent[1:FIRST_RESPONSE], child[1:FIRST_RESPONSE], strict=True):
        assert (a.type, a.model) == (b.type, b.model)
        if a.type != "clock.read":
            assert a.payload == b.payload
        if a.idempotency_key:
            assert b.idempotency_key == a.idempotency_key.replace(recorded, "shop-1.what-if", 1)
    answer = child[FIRST_RESPONSE]
    assert answer.payload["response"] == other_order_answer("B-2")
    assert answer.payload["overridden"] is True
    assert answer.idempotency_key == child[FIRST_RESPONSE - 1].idempotency_key
    # then it is live: the other order is looked up, the refund is simulated
    lookup = child[FIRST_RESPONSE + 1]
    assert lookup.payload["args"] == {"order_id": "B-2"}
    assert lookup.idempotency_key is not None
    assert lookup.idempotency_key.startswith("shop-1.what-if:lookup_order:")
    refund = next(
        e for e in child if e.type == "tool.completed" and e.payload["tool"] == "issue_refund"
    )
    assert refund.payload["dry_run"] is True
    assert refund.payload["result"]["dry_run"] is True
    assert refund.idempotency_key == "shop-1.what-if:issue_refund:B-2"
    assert child[-1].payload["status"] == "ok"
    assert shop.CALLS["lookup_order"] == 1
    assert shop.CALLS["issue_refund"] == 0
    assert ledger.calls() == 2  # only the recording's note and refund
    assert "dry-run tools were used" in " ".join(report.notes)
    # the child's steps are the parent's up to the override
    diff = tg.diff_runs(parent, child)
    assert diff.seq == FIRST_RESPONSE
    assert ("$.payload.overridden", MISSING, True) in [(c.path, c.old, c.new) for c in diff.changes]


def test_fork_without_override_serves_then_goes_live(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    report = tg.fork(store, recorded, NOTE_REQUESTED - 1, shop.build())
    assert report.new_run_id is not None
    assert report.new_run_id.startswith(recorded + ".fork-")
    child = store.events(report.new_run_id)
    assert [e.type for e in child] == [e.type for e in store.events(recorded)]
    # served up to the fork point: the pure tool did not run again; after it, live in dry run
    assert shop.CALLS["compute_refund"] == 0
    assert shop.CALLS["model"] == 1
    note = child[NOTE_REQUESTED + 1]
    assert note.payload["dry_run"] is True
    assert note.payload["result"] == {
        "note_id": "preview",
        "order_id": "A-1",
        "text": note.payload["result"]["text"],
    }
    assert ledger.calls() == 2
    diff = tg.diff_runs(store.events(recorded), child)
    assert diff.seq == NOTE_REQUESTED + 1


def test_a_live_fork_at_a_call_s_intent_dry_runs_it_and_every_effect_after_it(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    """Forked at a tool.requested, the call's intent is the parent's (which may have done
    its effect): it is dry-run even with dry_run=False. The refund after it ran live on top
    of that simulated note, and no note said why the note was simulated."""
    report = tg.fork(store, recorded, NOTE_REQUESTED, shop.build(), dry_run=False)
    assert report.final_status == "ok", report.render()
    child = store.events(report.new_run_id or "")
    assert child[NOTE_REQUESTED + 1].payload["dry_run"] is True
    refund = next(e for e in child if e.type == "tool.completed" and e.seq > NOTE_REQUESTED + 1)
    assert refund.payload["tool"] == "issue_refund"
    assert refund.payload["dry_run"] is True  # the agent acts on the simulated note
    assert ledger.calls() == 2  # only the recording's note and refund
    (note,) = [n for n in report.notes if f"seq {NOTE_REQUESTED}" in n]
    assert "post_note" in note
    assert "parent" in note
    assert f"fork at seq {NOTE_REQUESTED - 1}" in note
    assert "every write and irreversible tool after it ran in dry run" in note


def test_fork_at_a_seq_outside_the_run_is_refused(store: tg.SQLiteStore, recorded: str) -> None:
    with pytest.raises(tg.ReplayError, match="outside run"):
        tg.fork(store, recorded, 99, shop.build())
    with pytest.raises(tg.ReplayError, match="cannot override seq 8"):
        tg.fork(store, recorded, 8, shop.build(), override={"x": 1})


# -- resume after a real crash ------------------------------------------------------------------


def crashed(tmp_path: Path, hang_in: str) -> tuple[tg.SQLiteStore, Ledger]:
    db, books = tmp_path / "crash.db", tmp_path / "books.db"
    run_child(db, "crash", hang_in=hang_in, books=books, tmp_path=tmp_path)
    return tg.SQLiteStore(db, create=False), Ledger(str(books))


def intents(store: tg.SQLiteStore, key: str) -> list[str]:
    return [e.type for e in store.events("crash") if e.idempotency_key == key]


def test_resume_after_a_crash_in_a_write_tool_unconfirmed_is_a_dry_run(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, books = crashed(tmp_path, "post_note")
    monkeypatch.setattr(shop, "LEDGER", books)
    dangling = store.events("crash")[-1]
    assert dangling.type == "tool.requested"
    assert dangling.payload["tool"] == "post_note"
    assert books.calls("note") == 1  # the note reached the notes API before the crash

    report = tg.resume(store, "crash", shop.build())
    assert report.new_run_id == "crash"
    events = store.events("crash")
    assert store.verify("crash").ok
    assert intents(store, dangling.idempotency_key) == ["tool.requested", "tool.completed"]
    completion = events[NOTE_REQUESTED + 1]
    assert completion.payload["dry_run"] is True
    # the agent now acts on a simulated note, so the refund after it is simulated too
    refund = events[REFUND_REQUESTED + 1]
    assert refund.payload["dry_run"] is True
    assert events[-1].type == "run.finished"
    assert events[-1].payload["status"] == "ok"
    assert books.calls() == 1
    assert books.calls("refund") == 0
    assert any("dry run" in n for n in report.notes)
    # served steps did not run again; the tail ran live
    assert shop.CALLS["lookup_order"] == 0
    assert shop.CALLS["model"] == 1


def test_resume_after_a_crash_in_a_write_tool_confirmed_reuses_its_key(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, books = crashed(tmp_path, "post_note")
    monkeypatch.setattr(shop, "LEDGER", books)
    key = store.events("crash")[-1].idempotency_key
    assert key is not None
    assert key.startswith("crash:post_note:")

    report = tg.resume(store, "crash", shop.build(), confirm=True)
    assert report.reproduced, report.render()
    assert books.keys("note") == [key, key]  # called again, with the same key
    assert len(books.applied("note")) == 1  # and the notes API applied it once
    assert intents(store, key) == ["tool.requested", "tool.completed"]
    events = store.events("crash")
    # before running the note again, the resume took the run (docs/replay.md, Resume)
    claim = events[NOTE_REQUESTED + 1]
    assert claim.type == "tachograph.resume"
    assert claim.payload["open"] == NOTE_REQUESTED
    completed = events[NOTE_REQUESTED + 2]
    assert completed.idempotency_key == key
    assert completed.payload["result"]["id"] == "note_0001"
    assert "dry_run" not in completed.payload
    assert books.keys("refund") == ["crash:issue_refund:A-1"]  # the rest ran live
    assert events[-1].payload["status"] == "ok"
    assert store.verify("crash").ok
    with pytest.raises(tg.ReplayError, match="has finished"):
        tg.resume(store, "crash", shop.build())


def test_resume_after_a_crash_in_an_irreversible_tool_needs_confirmation(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, books = crashed(tmp_path, "issue_refund")
    monkeypatch.setattr(shop, "LEDGER", books)
    before = store.events("crash")
    key = "crash:issue_refund:A-1"
    assert before[-1].idempotency_key == key

    # even an agent that catches every Exception cannot swallow the refusal
    careless = shop.build(shop.Variant(swallow_errors=True))
    with pytest.raises(tg.ConfirmationRequired) as info:
        tg.resume(store, "crash", careless)
    assert (info.value.seq, info.value.key) == (REFUND_REQUESTED, key)
    assert "confirm" in str(info.value)
    assert store.events("crash") == before  # nothing appended: still resumable
    assert books.calls("refund") == 1
    assert shop.CALLS["issue_refund"] == 0

    report = tg.resume(store, "crash", shop.build(), confirm=True)
    assert report.reproduced
    assert books.keys("refund") == [key, key]
    assert len(books.applied("refund")) == 1
    assert intents(store, key) == ["tool.requested", "tool.completed"]
    assert store.events("crash")[-1].payload["status"] == "ok"
    assert store.verify("crash").ok


def test_resume_refuses_an_agent_that_left_the_recorded_path(
    tmp_path: Path, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, books = crashed(tmp_path, "issue_refund")
    monkeypatch.setattr(shop, "LEDGER", books)
    before = store.events("crash")
    with pytest.raises(tg.Divergence) as info:
        tg.resume(store, "crash", shop.build(shop.Variant(refund_share=0.5)), confirm=True)
    assert info.value.seq == 9
    assert "left unfinished" in str(info.value)
    assert store.events("crash") == before
    assert books.calls("refund") == 1


def test_fork_and_resume_apply_the_processors_they_are_given(
    tmp_path: Path, store: tg.SQLiteStore, ledger: Ledger
) -> None:
    mark = shop.mark_requests
    tg.record_run(shop.build(), shop.TASK, store=store, run_id="m", processors=[mark])
    # the served steps compare as processed, and the live ones are processed when recorded
    report = tg.fork(store, "m", 8, shop.build(), processors=[mark])
    assert report.reproduced, report.render()
    requested = [e for e in store.events(report.new_run_id or "") if e.type == "tool.requested"]
    assert len(requested) == 4
    assert all(e.payload["processed"] is True for e in requested)
    # without them the served steps differ from the processed record
    assert not tg.fork(store, "m", 8, shop.build()).reproduced

    db, books = tmp_path / "crash.db", tmp_path / "books.db"
    run_child(
        db,
        "crash",
        hang_in="post_note",
        books=books,
        tmp_path=tmp_path,
        extra_env={"SHOP_PROCESSED": "1"},
    )
    crashed_store = tg.SQLiteStore(db)
    report = tg.resume(crashed_store, "crash", shop.build(), processors=[mark], dry_run=True)
    assert report.reproduced, report.render()
    requested = [e for e in crashed_store.events("crash") if e.type == "tool.requested"]
    assert len(requested) == 4
    assert all(e.payload["processed"] is True for e in requested)


def test_an_override_goes_through_the_processors_like_any_live_payload(
    store: tg.SQLiteStore, recorded: str, ledger: Ledger
) -> None:
    """The override of a fork is new data: a secret in it is redacted where it is stored
    (it was stored as given, copied with ``processed=True`` as if recorded before)."""
    secret = "sk-proj-AAAAbbbbCCCCddddEEEEffff0001"
    answer = other_order_answer("B-2")
    answer["choices"][0]["message"]["content"] = f"use key {secret}"
    tg.fork(store, recorded, FIRST_RESPONSE, shop.build(), override=answer, new_run_id="what-if")
    stored = store.events("what-if")[FIRST_RESPONSE]
    assert stored.payload["overridden"] is True
    text = str(stored.payload)
    assert secret not in text
    assert "[redacted:secret:openai]" in text
    assert store.verify("what-if").ok


def _child(python: str, code: str, cwd: Path, env: dict[str, str], *, exits: int) -> None:
    """Run ``code`` in a new interpreter (a crash is its own ``os._exit``); it must exit so."""
    done = subprocess.run(
        [python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == exits, done.stderr


CONCURRENT_WRITES = """
import asyncio
import os

import tachograph as tg


@tg.tool(effect="write")
async def post(n):
    await asyncio.sleep(0.05)
    if os.environ.get("CRASH_IN_POST"):
        os._exit(9)
    return {"posted": n}


async def agent(items):
    return await asyncio.gather(*(post(n) for n in items))
"""


def test_resume_after_a_crash_amid_concurrent_writes_names_every_open_intent(
    tmp_path: Path, python: str, child_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "concurrent_writes.py").write_text(CONCURRENT_WRITES)
    db = tmp_path / "crash.db"
    code = (
        "import tachograph as tg, concurrent_writes as m; "
        f"tg.record_run(m.agent, [1, 2, 3], store={str(db)!r}, run_id='amid', "
        "durability='every')"
    )
    _child(python, code, tmp_path, {**child_env, "CRASH_IN_POST": "1"}, exits=9)
    store = tg.SQLiteStore(db, create=False)
    intents = [e.seq for e in store.events("amid") if e.type == "tool.requested"]
    assert intents == [1, 2, 3]  # all three were open when the process died
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("concurrent_writes")

    report = tg.resume(store, "amid", module.agent)
    completions = [e for e in store.events("amid") if e.type == "tool.completed"]
    assert [e.payload["dry_run"] for e in completions] == [True, True, True]
    (note,) = [n for n in report.notes if "intent" in n]
    assert "seq 1 (write), 2 (write) and 3 (write) were dry-run" in note


MIXED_INTENTS = """
import asyncio
import os

import tachograph as tg

DONE = []


@tg.tool(effect="write")
async def post(n):
    await asyncio.sleep(0.05)
    if os.environ.get("CRASH_IN_TOOLS"):
        os._exit(9)
    DONE.append(("post", n))
    return {"posted": n}


@tg.tool(effect="irreversible")
async def pay(n):
    await asyncio.sleep(0.05)
    if os.environ.get("CRASH_IN_TOOLS"):
        os._exit(9)
    DONE.append(("pay", n))
    return {"paid": n}


async def agent(items):
    return await asyncio.gather(*(post(n) for n in items), pay(0))
"""


def test_a_refused_resume_writes_nothing_so_the_confirmed_one_runs_every_open_intent(
    tmp_path: Path, python: str, child_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes left open beside an irreversible call were completed in dry run and queued
    # before the irreversible one refused: the refused resume wrote them, and the confirmed
    # resume it asks for then ran none of them.
    (tmp_path / "mixed_intents.py").write_text(MIXED_INTENTS)
    db = tmp_path / "crash.db"
    code = (
        "import tachograph as tg, mixed_intents as m; "
        f"tg.record_run(m.agent, [1, 2, 3], store={str(db)!r}, run_id='mixed', "
        "durability='every')"
    )
    _child(python, code, tmp_path, {**child_env, "CRASH_IN_TOOLS": "1"}, exits=9)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("mixed_intents")
    with tg.SQLiteStore(db, create=False) as store:
        before = store.events("mixed")
        assert [e.type for e in before].count("tool.requested") == 4
        with pytest.raises(tg.ConfirmationRequired):
            tg.resume(store, "mixed", module.agent)
        assert store.events("mixed") == before  # nothing written
        assert module.DONE == []  # nothing run
        report = tg.resume(store, "mixed", module.agent, confirm=True)
        assert report.final_status == "ok", report.render()
        assert sorted(module.DONE) == [("pay", 0), ("post", 1), ("post", 2), ("post", 3)]
        completed = [e for e in store.events("mixed") if e.type == "tool.completed"]
        assert not any(e.payload.get("dry_run") for e in completed)


ONE_WRITE = """
import os
import time

import tachograph as tg


@tg.tool(effect="write")
def charge(n):
    with open(os.environ["SIDE_LOG"], "a") as log:
        log.write(f"charge {n}\\n")
    if os.environ.get("CRASH_IN_CHARGE"):
        os._exit(9)
    time.sleep(float(os.environ.get("CHARGE_SLOW", "0")))
    return {"charged": n}


def agent(n):
    return charge(n)
"""


def _one_write(
    tmp_path: Path, child_env: dict[str, str], run_id: str, **extra: str
) -> tuple[Path, Path, dict[str, str], str]:
    """``ONE_WRITE`` in ``tmp_path``; the store and the side log its children use, their
    environment (``extra`` added), and the code that records run ``run_id`` (``charge(7)``)."""
    (tmp_path / "one_write.py").write_text(ONE_WRITE)
    db, side = tmp_path / "crash.db", tmp_path / "side.log"
    env = {**child_env, "SIDE_LOG": str(side), **extra}
    record = (
        "import tachograph as tg, one_write as m; "
        f"tg.record_run(m.agent, 7, store={str(db)!r}, run_id={run_id!r})"
    )
    return db, side, env, record


def test_two_resumes_at_once_run_the_open_write_once(
    tmp_path: Path, python: str, child_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each resume read the crashed run, then ran the open write again; the store refused the
    # second only at its next append, after its effect. A confirmed resume now takes the run
    # first: one durable event at the head it read.
    db, side, env, code = _one_write(tmp_path, child_env, "twice")
    _child(python, code, tmp_path, {**env, "CRASH_IN_CHARGE": "1"}, exits=9)
    assert side.read_text() == "charge 7\n"
    resume = (
        "import sys, tachograph as tg, one_write as m\n"
        f"try:\n    r = tg.resume({str(db)!r}, 'twice', m.agent, confirm=True)\n"
        "    print('RESUMED', r.final_status)\n"
        "except tg.ReplayError as e:\n    print('REFUSED', e); sys.exit(3)\n"
    )
    both = [
        subprocess.Popen(
            [python, "-c", resume],
            cwd=tmp_path,
            env={**env, "CHARGE_SLOW": "1.0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in both]
    codes = sorted(p.returncode for p in both)
    assert side.read_text().count("charge 7") == 2, (side.read_text(), outputs)  # once more
    assert codes[0] == 0, outputs
    assert codes[1] != 0, outputs  # the other resume ran nothing
    with tg.SQLiteStore(db, create=False) as store:
        assert store.verify("twice").ok
        kinds = [e.type for e in store.events("twice")]
    assert kinds.count("tachograph.resume") == 1
    assert kinds[-1] == "run.finished"
    # the claim is the library's: a replay of the resumed run neither serves nor expects it
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("one_write")
    report = tg.replay(tg.SQLiteStore(db, create=False), "twice", module.agent)
    assert report.reproduced, report.render()


def test_a_resume_that_died_in_the_effect_leaves_the_run_resumable(
    tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    db, side, env, record = _one_write(tmp_path, child_env, "again")
    resume = (
        "import tachograph as tg, one_write as m; "
        f"print(tg.resume({str(db)!r}, 'again', m.agent, confirm=True).final_status)"
    )
    for code, crash, expected in ((record, "1", 9), (resume, "1", 9), (resume, "", 0)):
        _child(python, code, tmp_path, {**env, "CRASH_IN_CHARGE": crash}, exits=expected)
    assert side.read_text().count("charge 7") == 3  # the crash, the resume that died, the last
    with tg.SQLiteStore(db, create=False) as store:
        kinds = [e.type for e in store.events("again")]
    assert kinds.count("tachograph.resume") == 2
    assert kinds[-1] == "run.finished"


def test_a_claim_made_on_another_host_holds_the_run_until_a_takeover(
    tmp_path: Path, python: str, child_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume on another host took the run and may still be in the effect: this host cannot
    ask its process. Taking such a claim for an ended one ran the payment a second time
    while the first could still be running; the resume now stops having run nothing, and
    ``takeover`` (the operator's word that it ended) lets it go on."""
    db, side, env, record = _one_write(tmp_path, child_env, "far", CRASH_IN_CHARGE="1")
    far_resume = (  # a resume on another host, which died in the effect (or is still in it)
        "import socket; socket.gethostname = lambda: 'far-host'\n"
        "import tachograph as tg, one_write as m\n"
        f"tg.resume({str(db)!r}, 'far', m.agent, confirm=True)"
    )
    _child(python, record, tmp_path, env, exits=9)
    _child(python, far_resume, tmp_path, env, exits=9)
    assert side.read_text().count("charge 7") == 2
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SIDE_LOG", str(side))
    module = importlib.import_module("one_write")
    with pytest.raises(tg.ReplayError, match=r"on host 'far-host'.*cannot ask.*--takeover"):
        tg.resume(str(db), "far", module.agent, confirm=True)
    assert side.read_text().count("charge 7") == 2  # nothing was run
    with tg.SQLiteStore(db, create=False) as store:
        assert [e.type for e in store.events("far")].count("tachograph.resume") == 1
    report = tg.resume(str(db), "far", module.agent, confirm=True, takeover=True)
    assert report.final_status == "ok", report.render()
    assert side.read_text().count("charge 7") == 3
    with tg.SQLiteStore(db, create=False) as store:
        kinds = [e.type for e in store.events("far")]
        assert store.verify("far").ok
    assert kinds.count("tachograph.resume") == 2
    assert kinds[-1] == "run.finished"


def test_a_claim_that_cannot_be_read_holds_the_run_too(
    tmp_path: Path, python: str, child_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim whose payload this read cannot see (erased here; a purpose's policy may
    withhold it) names no process to ask: it holds the run as one from another host does."""
    from tachograph.lifecycle.erasure import erase

    db, side, env, record = _one_write(tmp_path, child_env, "hid", CRASH_IN_CHARGE="1")
    resume = (
        "import tachograph as tg, one_write as m\n"
        f"tg.resume({str(db)!r}, 'hid', m.agent, confirm=True)"
    )
    _child(python, record, tmp_path, env, exits=9)
    _child(python, resume, tmp_path, env, exits=9)
    with tg.SQLiteStore(db, create=False) as store:
        (claim,) = [e.seq for e in store.events("hid") if e.type == "tachograph.resume"]
        erase(store, "hid", seqs=[claim], reason="test")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SIDE_LOG", str(side))
    module = importlib.import_module("one_write")
    with pytest.raises(tg.ReplayError, match=rf"took it at seq {claim} \(its claim cannot be read"):
        tg.resume(str(db), "hid", module.agent, confirm=True)
    assert side.read_text().count("charge 7") == 2
    report = tg.resume(str(db), "hid", module.agent, confirm=True, takeover=True)
    assert report.final_status == "ok", report.render()


def test_a_claim_of_this_host_under_a_pii_policy_is_asked_as_this_hosts(
    tmp_path: Path, python: str, child_env: dict[str, str]
) -> None:
    """A redactor stores an IP-address hostname as a token: this host's own claim, by a
    resume that died, must still read as this host's (and ended), not as another host's."""
    db, side, env, recording = _one_write(
        tmp_path,
        child_env,
        "pii",
        TACHOGRAPH_PII="on",
        TACHOGRAPH_PII_KEY="ab" * 16,
        TACHOGRAPH_PII_KEY_ID="k1",
    )
    env.pop("TACHOGRAPH_PII_KEY_FILE", None)
    host = "import socket; socket.gethostname = lambda: '10.1.2.3'\n"
    record = host + recording
    resume = host + (
        "import tachograph as tg, one_write as m\n"
        f"print(tg.resume({str(db)!r}, 'pii', m.agent, confirm=True).final_status)"
    )
    _child(python, record, tmp_path, {**env, "CRASH_IN_CHARGE": "1"}, exits=9)
    _child(python, resume, tmp_path, {**env, "CRASH_IN_CHARGE": "1"}, exits=9)
    _child(python, resume, tmp_path, env, exits=0)  # the claim's process ended: not held
    assert side.read_text().count("charge 7") == 3
    with tg.SQLiteStore(db, create=False) as store:
        claims = [e.payload for e in store.events("pii") if e.type == "tachograph.resume"]
    assert len(claims) == 2
    assert all(str(c["host"]).startswith("pii1:k1:") for c in claims)


def test_a_change_of_a_path_on_one_side_only_names_the_absent_side() -> None:
    """In JSON, an absent side was written {"missing": true}, which a recorded value of
    that shape could not be told from; it is left out and named in ``absent``."""
    from tachograph.replay.diff import MISSING, Change

    assert Change("$.a", MISSING, 1).to_dict() == {"path": "$.a", "new": 1, "absent": ["old"]}
    assert Change("$.a", 1, MISSING).to_dict() == {"path": "$.a", "old": 1, "absent": ["new"]}
    recorded = {"missing": True}
    assert Change("$.a", recorded, 2).to_dict() == {"path": "$.a", "old": recorded, "new": 2}
