"""Intent before effect: durability policies proved from a second connection and a killed
process; write failures surface; processors and trace context shape the stored event."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import tachograph as tg
from shop_agents.fixtures import run_child
from shop_agents.ledger import Ledger
from tachograph.testing import build_run


def stored(path: Path, run_id: str) -> list[tuple[int, str, str | None]]:
    """What an independent SQLite connection (not the recorder's) sees on disk."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT seq, type, idempotency_key FROM events WHERE run_id=? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        db.close()
    return [(r[0], r[1], r[2]) for r in rows]


seen_on_disk: list[list[tuple[int, str, str | None]]] = []
DB_PATH: list[Path] = []


@tg.tool(effect="irreversible")
def wire_money(to: str, cents: int, idempotency_key: str | None = None) -> dict[str, Any]:
    # Inside the tool body: look at the database through a connection of our own.
    seen_on_disk.append(stored(DB_PATH[0], "dur"))
    return {"wired": cents, "key": idempotency_key}


@tg.tool(effect="write")
def save_draft(text: str) -> str:
    seen_on_disk.append(stored(DB_PATH[0], "dur"))
    return "saved"


def test_effects_intent_is_durable_before_the_tool_body_runs(tmp_path: Path) -> None:
    DB_PATH[:] = [tmp_path / "runs.db"]
    seen_on_disk.clear()
    with tg.record(tg.SQLiteStore(DB_PATH[0]), actor="a", run_id="dur", durability="effects"):
        save_draft("hello")
        wire_money("acct-1", 500)
    first, second = seen_on_disk
    # the write tool's intent is on disk when its body runs
    assert first[-1][1] == "tool.requested"
    assert first[-1][2] is not None
    assert first[-1][2].startswith("dur:save_draft:")
    # and so is the irreversible one's, after the completion of the first call
    assert [row[1] for row in second[-3:]] == ["tool.requested", "tool.completed", "tool.requested"]
    assert second[-1][2] is not None
    assert second[-1][2].startswith("dur:wire_money:")


def test_every_makes_each_event_durable_before_returning(tmp_path: Path) -> None:
    path = tmp_path / "every.db"
    with tg.record(tg.SQLiteStore(path), actor="a", run_id="ev", durability="every"):
        tg.decide("first", 1)
        assert stored(path, "ev")[-1][1] == "decision"
        tg.now()
        assert stored(path, "ev")[-1][1] == "clock.read"
        tg.select_plan("p")
        assert len(stored(path, "ev")) == 4


def test_batch_writes_everything_by_the_end_of_the_run(tmp_path: Path) -> None:
    path = tmp_path / "batch.db"
    store = tg.SQLiteStore(path)
    with tg.record(store, actor="a", run_id="b", durability=tg.Durability.BATCH):
        for i in range(50):
            tg.decide("step", i)
    rows = stored(path, "b")
    assert len(rows) == 52
    assert rows[-1][1] == "run.finished"
    assert store.verify("b").ok


def test_a_store_that_refuses_surfaces_as_write_failed(tmp_path: Path) -> None:
    """Someone else advances the run's head: the intent cannot be written, so the tool must
    not run, and the agent hears about it."""
    path = tmp_path / "refuse.db"
    store = tg.SQLiteStore(path)
    seen_on_disk.clear()
    DB_PATH[:] = [path]
    with (
        pytest.raises(tg.WriteFailed) as info,
        tg.record(store, actor="a", run_id="dur") as run,
    ):
        tg.decide("before", 1)
        run.flush()
        intruder = tg.SQLiteStore(path)
        intruder.append(build_run("dur", 1, after=intruder.head("dur")))
        intruder.close()
        wire_money("acct-1", 500)
    assert "dur" in str(info.value)
    assert "incomplete" in str(info.value)
    assert isinstance(info.value.cause, tg.AppendRefused)
    assert seen_on_disk == []  # the irreversible body never ran
    assert [row[1] for row in stored(path, "dur")] == ["run.started", "decision", "decision"]


def test_a_closed_store_surfaces_as_write_failed(tmp_path: Path) -> None:
    store = tg.SQLiteStore(tmp_path / "closed.db")
    calls: list[str] = []

    @tg.tool(effect="write")
    def archive(name: str) -> str:
        calls.append(name)
        return name

    with pytest.raises(tg.WriteFailed), tg.record(store, actor="a", run_id="closed"):
        store.close()
        archive("x")
    assert calls == []


def test_crash_while_an_irreversible_tool_runs_leaves_its_intent(
    tmp_path: Path, ledger: Ledger
) -> None:
    """A real process is killed with SIGKILL inside issue_refund."""
    db, books = tmp_path / "crash.db", tmp_path / "books.db"
    run_child(db, "crash-1", hang_in="issue_refund", books=books, tmp_path=tmp_path)
    store = tg.SQLiteStore(db, create=False)
    events = store.events("crash-1")
    assert store.verify("crash-1").ok
    last = events[-1]
    assert last.type == "tool.requested"
    assert last.payload["tool"] == "issue_refund"
    assert last.payload["effect"] == "irreversible"
    assert last.idempotency_key == "crash-1:issue_refund:A-1"
    assert not any(
        e.type in ("tool.completed", "tool.failed") and e.idempotency_key == last.idempotency_key
        for e in events
    )
    assert not any(e.type == "run.finished" for e in events)
    assert store.run_info("crash-1").status is None
    state = tg.fold(events)
    assert list(state.pending) == ["crash-1:issue_refund:A-1"]
    assert state.status == "running"
    # the world did change: the intent is the evidence of it
    assert Ledger(str(books)).keys("refund") == ["crash-1:issue_refund:A-1"]


# -- processors and trace context ---------------------------------------------------------------


def redact_emails(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    def clean(value: Any) -> Any:
        if isinstance(value, str) and "@" in value:
            return "[email]"
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return clean(payload)  # type: ignore[no-any-return]


def tag(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    # runs after redact_emails: it sees the redacted payload
    if event_type == "tool.requested":
        return {**payload, "tagged": "[email]" in str(payload)}
    return payload


@tg.tool(effect="read")
def find_customer(email: str) -> dict[str, Any]:
    return {"email": email, "id": 7}


def test_processors_run_in_order_before_hashing(store: tg.SQLiteStore) -> None:
    with tg.record(
        store,
        actor="a",
        run_id="red",
        input="mail ann@example.com",
        processors=[redact_emails, tag],
    ) as run:
        run.output = find_customer("ann@example.com")
    events = store.events("red")
    assert events[0].payload["input"] == "[email]"
    assert events[1].payload["args"] == {"email": "[email]"}
    assert events[1].payload["tagged"] is True
    assert events[2].payload["result"] == {"email": "[email]", "id": 7}
    assert "example.com" not in store.raw_payload(events[2].event_id).decode()  # type: ignore[union-attr]
    assert store.verify("red").ok
    # the agent itself saw the real value
    assert run.output == {"email": "ann@example.com", "id": 7}


def test_the_current_opentelemetry_span_goes_on_the_event(store: tg.SQLiteStore) -> None:
    tracer = TracerProvider().get_tracer("tests")
    with tg.record(store, actor="a", run_id="otel"):
        tg.decide("outside", 0)
        with tracer.start_as_current_span("lookup") as span:
            find_customer("x")
            ctx = span.get_span_context()
    events = store.events("otel")
    assert events[1].trace_id is None
    assert events[1].span_id is None
    for event in events[2:4]:
        assert event.trace_id == f"{ctx.trace_id:032x}"
        assert event.span_id == f"{ctx.span_id:016x}"
    assert events[-1].trace_id is None
    assert store.verify("otel").ok


def test_each_event_carries_the_span_current_at_its_own_append(store: tg.SQLiteStore) -> None:
    """The ids of the last context seen are reused only while that same context is current:
    nested spans, a span left, and a span started in another thread each change what goes on
    the event."""
    import threading

    tracer = TracerProvider().get_tracer("tests")

    def ids(span: Any) -> tuple[str, str]:
        ctx = span.get_span_context()
        return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"

    expected: list[tuple[str | None, str | None]] = []
    seen_in_thread: list[tuple[str | None, str | None]] = []
    with tg.record(store, actor="a", run_id="otel-nested"):
        with tracer.start_as_current_span("outer") as outer:
            tg.decide("a", 1)
            expected.append(ids(outer))
            with tracer.start_as_current_span("inner") as inner:
                tg.decide("b", 2)
                tg.decide("c", 3)
                expected += [ids(inner), ids(inner)]

                def other_thread() -> None:
                    # the thread runs in a copy of the run's context: the same span
                    tg.decide("d", 4)
                    with tracer.start_as_current_span("elsewhere") as there:
                        tg.decide("e", 5)
                        seen_in_thread.append(ids(there))

                worker = threading.Thread(target=other_thread)
                worker.start()
                worker.join()
                expected += [ids(inner), seen_in_thread[0]]
                tg.decide("f", 6)
                expected.append(ids(inner))
            tg.decide("g", 7)
            expected.append(ids(outer))
        tg.decide("h", 8)
        expected.append((None, None))
    decisions = [e for e in store.events("otel-nested") if e.type == "decision"]
    assert [(e.trace_id, e.span_id) for e in decisions] == expected
    assert len({span for _trace, span in expected if span}) == 3


def test_the_span_of_the_last_event_is_not_kept_alive(store: tg.SQLiteStore) -> None:
    """The recorder remembers the last context it drew ids from only weakly: once the agent
    is done with a span, nothing of tachograph's holds it (nor its attributes)."""
    import gc
    import weakref

    tracer = TracerProvider().get_tracer("tests")
    with tracer.start_as_current_span("only") as span:
        with tg.record(store, actor="a", run_id="otel-weak"):  # every event in the span
            tg.decide("a", 1)
        alive = weakref.ref(span)
    del span
    gc.collect()
    assert alive() is None
    (decision,) = [e for e in store.events("otel-weak") if e.type == "decision"]
    assert decision.span_id is not None


def test_a_refused_run_does_not_break_other_runs_of_the_store(tmp_path: Path) -> None:
    """One store, one writer: run A's events are refused, run B recorded beside it and run C
    recorded after it are written in full."""
    path = tmp_path / "shared.db"
    store = tg.SQLiteStore(path)

    @tg.tool(effect="write")
    def archive(name: str) -> str:
        return name

    async def run_b(started: asyncio.Event, go: asyncio.Event) -> None:
        async with tg.record(store, actor="b", run_id="B", durability="batch"):
            started.set()
            await go.wait()
            for i in range(20):
                tg.decide("b", i)

    async def main() -> None:
        started, go = asyncio.Event(), asyncio.Event()
        other = asyncio.create_task(run_b(started, go))
        await started.wait()
        with pytest.raises(tg.WriteFailed) as info:
            async with tg.record(store, actor="a", run_id="A") as run:
                tg.decide("a", 0)
                run.flush()
                intruder = tg.SQLiteStore(path)
                intruder.append(build_run("A", 1, after=intruder.head("A")))
                intruder.close()
                go.set()
                await asyncio.sleep(0)
                for i in range(20):
                    tg.decide("a", i)  # queued beside B's events, then refused
                archive("x")
        assert info.value.run_id == "A"
        await other

    asyncio.run(main())
    assert not tg.capture.recorder.writer_for(store).unreported()  # the caller was told
    assert [row[1] for row in stored(path, "B")][-1] == "run.finished"
    assert len(stored(path, "B")) == 22
    assert store.verify("B").ok
    with tg.record(store, actor="c", run_id="C"):
        archive("y")
    assert [row[1] for row in stored(path, "C")] == [
        "run.started",
        "tool.requested",
        "tool.completed",
        "run.finished",
    ]


def test_a_redacted_run_replays_with_its_processors(store: tg.SQLiteStore) -> None:
    @tg.agent(name="crm")
    def crm(task: str) -> Any:
        customer = find_customer("ann@example.com")
        tg.decide("contact", customer["email"])
        return customer

    tg.record_run(crm, "call customer 7", store=store, run_id="r", processors=[redact_emails])
    assert store.events("r")[1].payload["args"]["email"] == "[email]"
    # compared as the recorder would have stored them: redacted
    assert tg.replay(store, "r", crm, processors=[redact_emails]).reproduced
    # without the processors the agent's real values differ from the redacted record
    report = tg.replay(store, "r", crm)
    assert report.first is not None
    assert report.first.kind is tg.DivergenceKind.ARGS_CHANGED
    assert [(c.path, c.old, c.new) for c in report.first.changes] == [
        ("$.payload.args.email", "[email]", "ann@example.com")
    ]


class _SlowStore(tg.SQLiteStore):
    """A store slower than the agent: each append waits a little."""

    def append(self, events: Any, **options: Any) -> Any:
        import time

        time.sleep(0.002)
        return super().append(events, **options)


def test_a_slow_store_bounds_the_writer_queue(tmp_path: Path) -> None:
    """Back-pressure: the events waiting for the writer thread never exceed its bound, and
    every event still reaches the store, in order."""
    from tachograph.capture.recorder import Writer

    store = _SlowStore(tmp_path / "slow.db")
    writer = Writer(store, max_batch=8, max_queue=20)
    seen: list[int] = []
    events = build_run("slow", 400)
    for event in events:
        writer.submit(event)
        seen.append(writer.queued)
    writer.wait()
    assert max(seen) <= 20  # without the bound it grows toward 400
    assert max(seen) >= 10  # the store really was slower than the submits
    assert [e.seq for e in store.read("slow", decode=False)] == list(range(400))
    writer.close()
    store.close()


def test_a_submit_wakes_the_writer_only_to_start_or_fill_a_batch(tmp_path: Path) -> None:
    """While the writer thread cannot run (here: the test holds its lock, as the agent's
    thread holds the GIL), only the submit that starts the queue and the one that fills a
    batch notify it; the rest would pay for a wake-up of a thread already woken. Once it
    runs, it takes batch after batch: no event is left waiting for another notify."""
    import threading
    import time

    from tachograph.capture.recorder import Writer

    class Counting(threading.Condition):
        notified = 0

        def notify_all(self) -> None:
            Counting.notified += 1
            super().notify_all()

    store = tg.SQLiteStore(tmp_path / "wake.db")
    writer = Writer(store, max_batch=8, linger=60.0)
    writer._cond = Counting(writer._lock)
    events = build_run("wake", 100)
    with writer._lock:  # re-entrant: this thread's submits go through, the writer waits
        for event in events:
            writer.submit(event)
        assert Counting.notified == 2  # the first event, and the eighth (a full batch)
    deadline = time.monotonic() + 20.0
    while writer.queued and time.monotonic() < deadline:  # no flush: nobody waits
        time.sleep(0.005)
    # on that one wake-up it took every batch, and then the rest (which had waited for
    # those commits), long before the 60 s linger
    assert writer.queued == 0
    assert [e.seq for e in store.read("wake", decode=False)] == list(range(100))
    writer.close()
    store.close()


def test_a_full_queue_is_committed_at_once_not_after_the_linger(tmp_path: Path) -> None:
    """A submit held back by a full queue counts as a caller waiting for the writer thread:
    it commits at once instead of lingering (60 s here) while the agent cannot go on."""
    import threading

    from tachograph.capture.recorder import Writer

    store = tg.SQLiteStore(tmp_path / "full.db")
    writer = Writer(store, max_batch=512, max_queue=4, linger=60.0)
    events = build_run("full", 50)

    def submit_all() -> None:
        for event in events:
            writer.submit(event)  # from the fifth on, each waits for room in the queue

    agent = threading.Thread(target=submit_all)
    agent.start()
    agent.join(30.0)  # a liveness guard: the linger alone would hold it 60 s per batch
    assert not agent.is_alive()
    writer.wait()
    assert [e.seq for e in store.read("full", decode=False)] == list(range(50))
    writer.close()
    store.close()


def test_large_payloads_are_bounded_by_bytes_too(tmp_path: Path) -> None:
    """The queue's byte bound: 200 events of 20 KB payloads behind a slow store never hold
    more than the bound (plus the one event that may always enter an empty queue), however
    many the count bound would admit; every event still reaches the store, in order."""
    from tachograph.capture.recorder import QUEUED_EVENT_BYTES, Writer

    store = _SlowStore(tmp_path / "slow-bytes.db")
    bound = 200_000
    writer = Writer(store, max_batch=4, max_queue=10_000, max_queue_bytes=bound)
    events = build_run("big", 200, payload=lambda seq: {"text": "x" * 20_000, "seq": seq})
    one = len(events[1].payload_bytes or b"") + QUEUED_EVENT_BYTES
    seen: list[int] = []
    for event in events:
        writer.submit(event)
        seen.append(writer.queued_bytes)
    writer.wait()
    assert max(seen) <= bound + one
    assert max(seen) >= bound // 2  # the store really was slower than the submits
    assert writer.queued_bytes == 0
    assert [e.seq for e in store.read("big", decode=False)] == list(range(200))
    writer.close()
    store.close()


def test_a_store_closed_under_a_recording_is_not_asked_for_seals_again(tmp_path: Path) -> None:
    """The writer seals a quiet run on a timer; once its store is closed it stops asking
    (it used to retry every period for as long as the process lived)."""
    import time

    from tachograph.capture.recorder import writer_for
    from tachograph.sealing import SealPolicy

    store = tg.SQLiteStore(tmp_path / "closed-seals.db")
    policy = SealPolicy(every_events=10_000, every_seconds=0.05)
    with pytest.raises(tg.WriteFailed), tg.record(store, actor="a", run_id="q", seal=policy) as run:
        tg.decide("before", 1)
        run.flush()
        writer = writer_for(store)
        store.close()
        time.sleep(0.6)  # a dozen periods
        errors = len(writer.seals.errors)
        assert not writer.seals.active  # the run is no longer tracked
    assert 1 <= errors <= 2


def test_a_processor_that_edits_in_place_keys_the_call_on_what_it_left(
    store: tg.SQLiteStore,
) -> None:
    """The key is derived from the processed arguments even when a processor changes them in
    place (same object): the masked address, never the real one (SPEC section 5)."""
    from tachograph.record.seal import KeyDeriver, key_secret_of

    def mask_in_place(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        args = payload.get("args")
        if event_type == "tool.requested" and isinstance(args, dict) and "email" in args:
            args["email"] = "[email]"
        return payload

    with tg.record(store, actor="a", run_id="inplace", processors=[mask_in_place]):
        find_customer("ann@example.com")
    events = store.events("inplace")
    request = next(e for e in events if e.type == "tool.requested")
    assert request.payload["args"] == {"email": "[email]"}
    keys = KeyDeriver("inplace", key_secret_of(events[0].payload))
    assert request.idempotency_key == keys.key("find_customer", {"email": "[email]"})


class _CommitLog(tg.SQLiteStore):
    """The real SQLite store, noting the event types of each transaction it commits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.commits: list[list[str]] = []

    def append(self, events: Any, **options: Any) -> Any:
        receipts = super().append(events, **options)
        self.commits.append([e.type for e in events])
        return receipts


@tg.tool(effect="write")
def put_note(text: str) -> str:
    return text


def test_a_completion_lingers_into_the_next_intents_commit(tmp_path: Path) -> None:
    """Group commit: with the writer lingering, the completion of one write call is not
    committed on its own; the intent of the next call takes it into its commit. Five calls
    cost five commits before the run's end, not ten; every event is stored, in order."""
    from tachograph.capture.recorder import writer_for

    store = _CommitLog(tmp_path / "linger.db")
    writer_for(store).linger = 3600.0  # only a durable event or a flush ends the wait
    with tg.record(store, actor="a", run_id="linger", input=None, tools=[put_note]) as run:
        for i in range(5):
            put_note(f"note {i}")
        run.output = "done"
    pair = ["tool.completed", "tool.requested"]
    assert store.commits[0] == ["run.started", "tool.requested"]
    assert store.commits[1:5] == [pair] * 4
    assert store.commits[5][0] == "tool.completed"
    assert store.commits[-1][-1] == "run.finished"
    assert len(store.commits) <= 7  # the run's end may add a commit for its last events
    types = [r[1] for r in stored(tmp_path / "linger.db", "linger")]
    assert types == ["run.started", *(["tool.requested", "tool.completed"] * 5), "run.finished"]
    store.close()


def test_a_flush_does_not_wait_for_the_linger(tmp_path: Path) -> None:
    """A flush (or anything else that waits for the writer) ends the linger at once: with an
    hour of linger, events appended without durability are on disk when flush returns."""
    import threading

    from tachograph.capture.recorder import writer_for

    path = tmp_path / "flush.db"
    store = _CommitLog(path)
    writer_for(store).linger = 3600.0
    with tg.record(store, actor="a", run_id="fl", input=None) as run:
        run.flush()
        for i in range(3):
            tg.decide("step", i)
        waiter = threading.Thread(target=run.flush)
        waiter.start()
        waiter.join(60)  # a liveness bound, far below the linger: not a timing claim
        assert not waiter.is_alive()
        assert [r[1] for r in stored(path, "fl")][-3:] == ["decision"] * 3
        run.output = None
    store.close()
