"""Scans read beside verification (``tachograph.record.scan``) against the readings they stand
for: ``BlobScan`` against ``check_stored_blobs``, ``UnvouchedScan`` against
``unvouched_in_stored``, whatever the rows and however a run is cut into chunks; then in real
worker processes (a long run in chunks, small runs in groups), and through ``tacho verify``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import signal
import sqlite3
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tachograph.capture.vouch import UnvouchedScan, unvouched_in_stored
from tachograph.cli.app import cli
from tachograph.lifecycle.blobs import BlobCheck, BlobScan, BlobStore, check_stored_blobs
from tachograph.record.event import EventType, new_event
from tachograph.record.scan import Scanning
from tachograph.store import MemoryStore, SQLiteStore, verify_all, verify_stored
from tachograph.store.parallel import verify_all_parallel, verify_stored_parallel
from tachograph.testing import build_run

MODEL_RESPONSE = EventType.MODEL_RESPONSE.value
MODEL_REQUEST = EventType.MODEL_REQUEST.value
TOOL_REQUESTED = EventType.TOOL_REQUESTED.value
TOOL_COMPLETED = EventType.TOOL_COMPLETED.value
RUN_FINISHED = EventType.RUN_FINISHED.value
HANDOFF = EventType.HANDOFF.value
DECISION = EventType.DECISION.value
PLAN_SELECTED = EventType.PLAN_SELECTED.value

KINDS = [
    MODEL_REQUEST, MODEL_RESPONSE, TOOL_REQUESTED, TOOL_COMPLETED, HANDOFF, DECISION,
    PLAN_SELECTED, RUN_FINISHED,
]  # fmt: skip
TOOLS = ["a", "b", "transfer_to_x"]


def _answer(shape: int, tools: Sequence[str]) -> dict[str, Any]:
    """A model answer asking for ``tools``, in one of three wire shapes."""
    if shape == 0:  # Anthropic messages
        blocks: list[Any] = [{"type": "text", "text": "ok"}]
        blocks += [{"type": "tool_use", "name": t, "id": f"tu_{i}"} for i, t in enumerate(tools)]
        return {"response": {"content": blocks}}
    if shape == 1:  # OpenAI chat completions
        calls = [{"id": f"c{i}", "function": {"name": t}} for i, t in enumerate(tools)]
        return {"response": {"choices": [{"message": {"tool_calls": calls}}]}}
    items = [{"type": "function_call", "name": t, "call_id": f"f{i}"} for i, t in enumerate(tools)]
    return {"response": {"output": items}}


def _payload(kind: str, draw: dict[str, Any], blobs: BlobStore, index: int) -> dict[str, Any]:
    tools = draw["tools"]
    if kind == MODEL_RESPONSE:
        payload = _answer(draw["shape"], tools)
    elif kind == TOOL_REQUESTED:
        payload = {"tool": tools[0] if tools else "a", "args": {}}
    elif kind == RUN_FINISHED:
        payload = {"status": "aborted" if draw["flag"] else "ok"}
        if tools:
            payload["unvouched"] = [{"tool": t, "seq": index, "call_id": None} for t in tools]
    else:
        payload = {"note": f"step {index}"}
    blob = draw["blob"]
    if blob is not None:
        data = f"blob {index} {blob}".encode()
        if blob == "missing":
            ref = {"$blob": "sha256:" + f"{index:064x}", "size": 3, "media_type": "text/plain"}
        elif blob == "malformed":  # shaped like a reference, not one: a bad digest or size
            ref = {"$blob": f"sha256:{index}", "size": -index, "media_type": "text/plain"}
        else:
            ref = blobs.put(data, media_type="text/plain")
            if blob == "damaged":
                blobs.path_for(ref["$blob"]).write_bytes(data + b"!")
        payload["attachment"] = {"files": [ref]}
    return payload


_STEP = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(KINDS),
        "tools": st.lists(st.sampled_from(TOOLS), max_size=3),
        "shape": st.integers(0, 2),
        "flag": st.booleans(),
        "blob": st.sampled_from([None, None, None, "present", "missing", "damaged", "malformed"]),
        # what is done to the stored bytes afterwards
        "stored": st.sampled_from(
            ["as is"] * 6 + ["erased", "not json", "escaped key", "text", "null"]
        ),
    }
)


def _forger(path: Path) -> sqlite3.Connection:
    """A connection to the store at ``path`` with its guarding triggers dropped: what a
    forger with write access to the file can do."""
    db = sqlite3.connect(path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
        db.execute(f"DROP TRIGGER {name}")
    return db


def _record(path: Path, steps: list[dict[str, Any]]) -> tuple[str, BlobStore]:
    """A run of ``steps`` in a new store at ``path``, its stored bytes then altered as each
    step says (as a forger with write access would: the chain may no longer verify)."""
    blobs = BlobStore.beside(str(path))
    run_id = "scanned"
    events = []
    prev = None
    for seq, step in enumerate(steps):
        kind = EventType.RUN_STARTED.value if seq == 0 else step["kind"]
        event = new_event(
            run_id=run_id,
            seq=seq,
            type=kind,
            actor="test",
            payload=_payload(kind, step, blobs, seq),
            prev_hash=prev,
        )
        prev = event.hash
        events.append(event)
    with SQLiteStore(path) as store:
        store.append(events)
    db = _forger(path)
    try:
        for seq, step in enumerate(steps):
            of_seq = f"id=(SELECT id FROM events WHERE run_id='{run_id}' AND seq={seq})"
            (body,) = db.execute(f"SELECT body FROM payloads WHERE {of_seq}").fetchone()
            new: Any = body
            if step["stored"] == "erased":
                new = None
            elif step["stored"] == "not json":
                new = body[:-1]  # a cut body: "$blob" may still be in it
            elif step["stored"] == "escaped key":
                new = body.replace(b'"$blob"', b'"\\u0024blob"').replace(
                    b'"tool_use"', b'"tool\\u005fuse"'
                )
            elif step["stored"] == "text":
                new = body.decode()  # stored as TEXT: no longer bytes
            elif step["stored"] == "null":
                new = b"null"
            if new is not body:
                db.execute(f"UPDATE payloads SET body=? WHERE {of_seq}", (new,))
    finally:
        db.close()
    return run_id, blobs


def _cut(rows: list[Any], rng: random.Random) -> list[list[Any]]:
    """``rows`` cut at random places into consecutive chunks (some empty)."""
    cuts = sorted(rng.randint(0, len(rows)) for _ in range(rng.randint(0, 4)))
    bounds = [0, *cuts, len(rows)]
    return [rows[a:b] for a, b in itertools.pairwise(bounds)]


def _scanned_in_chunks(scan: Any, rows: list[Any], rng: random.Random) -> Any:
    """``scan``'s result of ``rows`` read as chunks (a part each), fed in random pages."""
    results = []
    for chunk in _cut(rows, rng):
        part = scan.begin()
        at = 0
        while at < len(chunk):
            size = rng.randint(1, 7)
            part.feed(chunk[at : at + size])
            at += size
        results.append(part.result())
    return scan.join("scanned", results)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=25), st.randoms(use_true_random=False))
def test_a_scan_in_any_chunks_reads_what_the_stored_readings_read(
    steps: list[dict[str, Any]], rng: random.Random
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scans.db"
        run_id, blobs = _record(path, steps)
        with SQLiteStore(path) as store:
            rows = list(store.read_rows(run_id))
            try:
                expected_blobs: Any = check_stored_blobs(store, run_id, blobs)
            except Exception:
                expected_blobs = None  # what the scan must say too: it cannot read the run
            expected_calls = unvouched_in_stored(store.read(run_id, decode=False))
            blob_scan = BlobScan.beside(store)
            try:
                got_blobs = _scanned_in_chunks(blob_scan, rows, rng)
            except Exception:
                got_blobs = None
            assert got_blobs == expected_blobs
            assert _scanned_in_chunks(UnvouchedScan(), rows, rng) == expected_calls
            # and through the verifier, in this process: one read, the same results
            report = verify_stored(store, run_id, scans=[blob_scan, UnvouchedScan()])
            assert report.scanned == {"blobs": expected_blobs, "unvouched": expected_calls}
            plain = verify_stored(store, run_id)
            assert report.to_dict() == plain.to_dict()


# -- in worker processes -----------------------------------------------------------------


N = 600
CHUNK = 40  # two workers: 8 chunks of 75 events


@contextlib.contextmanager
def _alarm(seconds: int, handler: Any = None) -> Iterator[None]:
    """Run the block with SIGALRM due in ``seconds``; ``handler`` (by default: raise
    ``TimeoutError``, the call hung) runs when it comes. The old handler is put back."""

    def too_long(*_: object) -> None:
        raise TimeoutError("the verification hung")

    previous = signal.signal(signal.SIGALRM, handler or too_long)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _long_steps(seed: int) -> list[dict[str, Any]]:
    """A long run whose tool calls and blob references fall on and across chunk borders."""
    rng = random.Random(seed)
    steps = []
    for seq in range(N):
        kind = [MODEL_REQUEST, MODEL_RESPONSE, TOOL_REQUESTED, TOOL_COMPLETED][seq % 4]
        if seq in (74, 75, 149, 150):  # an answer's calls made in the next chunk
            kind = MODEL_RESPONSE
        if seq == N - 1:
            kind = RUN_FINISHED
        steps.append(
            {
                "kind": kind,
                "tools": rng.sample(TOOLS, rng.randint(0, 2)),
                "shape": seq % 3,
                "flag": False,
                "blob": rng.choice([None] * 8 + ["present", "missing", "damaged"])
                if seq not in (75, 76, 150, 225)
                else "damaged",
                "stored": "escaped key" if seq in (150, 225) else "as is",
            }
        )
    return steps


@pytest.fixture
def scanned_store(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "long.db"
    run_id, _blobs = _record(path, _long_steps(7))
    with SQLiteStore(path) as store:
        store.append(build_run("short", 5))
    return path, run_id


def test_scans_in_workers_find_what_the_stored_readings_find(
    scanned_store: tuple[Path, str],
) -> None:
    path, run_id = scanned_store
    with SQLiteStore(path) as store:
        scans = [BlobScan.beside(store), UnvouchedScan()]
        blobs = BlobStore.beside(store)
        expected = {
            "blobs": check_stored_blobs(store, run_id, blobs),
            "unvouched": unvouched_in_stored(store.read(run_id, decode=False)),
        }
        # the run is worth the test: failing and expired blobs, unvouched calls
        assert expected["blobs"].failures
        assert expected["blobs"].expired
        assert expected["unvouched"]
        assert any(f[0] in (150, 225) for f in expected["blobs"].failures)  # escaped keys
        chunked = verify_stored_parallel(
            store, run_id, tenant="default", workers=2, chunk=CHUNK, scans=scans
        )
        serial = verify_stored(store, run_id, scans=scans)
        assert chunked.scanned == serial.scanned == expected
        assert chunked.to_dict() == serial.to_dict() == verify_stored(store, run_id).to_dict()
        # every run, large ones in chunks and small ones in groups
        reports = list(verify_all_parallel(store, workers=2, chunk=CHUNK, scans=scans))
        assert [r.to_dict() for r in reports] == [r.to_dict() for r in verify_all(store)]
        by_run = {r.run_id: r.scanned for r in reports}
        assert by_run[run_id] == expected
        assert by_run["short"] == {"blobs": BlobCheck("short"), "unvouched": ()}
        grouped = list(verify_all_parallel(store, workers=2, scans=scans))  # no chunks
        assert [r.scanned for r in grouped] == [r.scanned for r in reports]


def test_a_chunked_run_that_reads_apart_is_scanned_serially_with_the_same_results(
    scanned_store: tuple[Path, str],
) -> None:
    """A seq gap makes the chunks disagree with the serial reading: the serial verifier gives
    the report, and the scans run again with it."""
    path, run_id = scanned_store
    db = _forger(path)
    db.execute(f"UPDATE events SET seq=seq+1000 WHERE run_id='{run_id}' AND seq=300")
    db.close()
    with SQLiteStore(path) as store:
        scans = [BlobScan.beside(store), UnvouchedScan()]
        chunked = verify_stored_parallel(store, run_id, workers=2, chunk=CHUNK, scans=scans)
        serial = verify_stored(store, run_id, scans=scans)
        assert not chunked.ok
        assert chunked.to_dict() == serial.to_dict()
        assert chunked.scanned == serial.scanned
        assert chunked.scanned["blobs"] == check_stored_blobs(
            store, run_id, BlobStore.beside(store)
        )


class _Raises:
    """A scan whose part fails on the rows of one seq."""

    name = "raises"

    def __init__(self, at: int) -> None:
        self.at = at

    def begin(self) -> Any:
        at = self.at

        class Part:
            seen = 0

            def feed(self, rows: Sequence[Any]) -> None:
                if any(row[2] == at for row in rows):
                    raise RuntimeError("this scan trips here")
                self.seen += len(rows)

            def result(self) -> int:
                return self.seen

        return Part()

    def join(self, run_id: str | None, parts: Sequence[Any]) -> int:
        return sum(parts)


def test_a_scan_that_raises_says_nothing_and_the_verification_is_untouched() -> None:
    store = MemoryStore()
    store.append(build_run("r", 40))
    tripped = verify_stored(store, "r", scans=[_Raises(30), UnvouchedScan()])
    assert tripped.scanned == {"raises": None, "unvouched": ()}
    assert tripped.to_dict() == verify_stored(store, "r").to_dict()
    assert verify_stored(store, "r", scans=[_Raises(99)]).scanned == {"raises": 40}
    scanning = Scanning([_Raises(99)])
    scanning.feed(list(store.read_rows("r")))
    assert scanning.joined("r") == {"raises": 40}
    assert scanning.failed() == {"raises": None}


class _BreaksAfter(MemoryStore):
    """A store whose read of a run fails after some rows (a damaged page)."""

    def read_rows(self, run_id: str, *, tenant: str | None = None, from_seq: int = 0) -> Any:
        for row in super().read_rows(run_id, tenant=tenant, from_seq=from_seq):
            if row[2] == 1500:
                raise ValueError("database disk image is malformed")
            yield row


def test_a_run_read_only_in_part_has_no_scan_results() -> None:
    store = _BreaksAfter()
    store.append(build_run("r", 2000))
    report = verify_stored(store, "r", scans=[_Raises(-1)])
    assert not report.ok
    assert "could not read" in report.failures[-1].message
    assert report.scanned == {"raises": None}  # 1,500 rows seen, but not the run


def test_tacho_verify_with_workers_reads_blobs_and_unvouched_calls_alike(
    scanned_store: tuple[Path, str],
) -> None:
    path, run_id = scanned_store
    runner = CliRunner()
    outputs = {}
    for name, args in {
        "all": ["verify", "--json"],
        "all-2": ["verify", "--all", "--workers", "2", "--json"],
        "one": ["verify", run_id, "--json"],
        "one-2": ["verify", run_id, "--workers", "2", "--json"],
    }.items():
        result = runner.invoke(cli, ["--store", str(path), *args])
        assert result.exit_code == 1, result.output  # damaged blobs fail check 5
        outputs[name] = json.loads(result.stdout)
    assert outputs["all"] == outputs["all-2"]
    assert outputs["one"] == outputs["one-2"]
    (one,) = outputs["one"]["runs"]
    assert one["blobs"]["failures"]
    assert one["unvouched"]
    with SQLiteStore(path) as store:
        calls = unvouched_in_stored(store.read(run_id, decode=False))
        check = check_stored_blobs(store, run_id, BlobStore.beside(store))
    assert one["unvouched"] == [c.to_dict() for c in calls]
    assert one["blobs"] == {k: v for k, v in check.to_dict().items() if k != "run_id"}
    assert outputs["one"]["blobs"] == outputs["all"]["blobs"]


def test_an_unvouched_scan_part_holds_what_it_must_and_no_more() -> None:
    """A part keeps the followed events up to its first settling point and since its last
    (tools and choices as counts), and folds the rest: its result does not grow with a
    tool-only stretch, nor with the turns of an agent loop."""
    store = MemoryStore()
    kinds: list[tuple[str, dict[str, Any]]] = []
    for i in range(3_000):  # a tool-only stretch: tools, choices, no model request
        kinds.append((TOOL_REQUESTED, {"tool": "a" if i % 2 else "b"}))
        kinds.append((DECISION, {"note": i}))
    for i in range(1_000):  # then an agent loop whose every answer is acted on
        kinds.append((MODEL_REQUEST, {"messages": []}))
        kinds.append((MODEL_RESPONSE, _answer(i % 3, ["a"])))
        kinds.append((TOOL_REQUESTED, {"tool": "a"}))
    kinds.append((MODEL_RESPONSE, _answer(0, ["b"])))  # left open at the end of the part
    events, prev = [], None
    for seq, (kind, payload) in enumerate([(EventType.RUN_STARTED.value, {}), *kinds]):
        event = new_event(
            run_id="r", seq=seq, type=kind, actor="t", payload=payload, prev_hash=prev
        )
        prev = event.hash
        events.append(event)
    store.append(events)
    rows = list(store.read_rows("r"))
    part = UnvouchedScan().begin()
    for at in range(0, len(rows), 1000):
        part.feed(rows[at : at + 1000])
    head, middle, tail, listed = part.result()
    # the stretch is one item of two tool names; the head ends at the first model request
    assert len(head) == 2
    assert head[0].tools == {"a": 3_000 // 2, "b": 3_000 // 2}
    assert head[0].decided
    assert middle == ()  # every answer's call was made
    # since the last model request: its answer, the tool, and the answer left open, whose
    # call the next part may yet make
    assert len(tail) == 3
    assert listed == []
    whole = UnvouchedScan().join("r", [part.result()])
    assert whole == unvouched_in_stored(store.read("r", decode=False))
    assert [c.tool for c in whole] == []  # open at the end of an unfinished run: not judged


def test_a_forged_payload_nested_deep_is_read_by_workers_as_by_this_process(
    scanned_store: tuple[Path, str],
) -> None:
    """What a part keeps is plain values: a tool name or a status nested hundreds of levels
    deep (a forger's bytes; recording refuses past 64) must not make a worker's result
    unpicklable, which would end the verification with an error instead of a report."""
    path, run_id = scanned_store
    deep = b"[" * 600 + b"1" + b"]" * 600
    db = _forger(path)
    for seq, body in (
        (302, b'{"tool":' + deep + b"}"),
        (N - 1, b'{"status":' + deep + b',"unvouched":[{"tool":' + deep + b',"seq":1}]}'),
    ):
        db.execute(
            "UPDATE payloads SET body=? WHERE id=(SELECT id FROM events WHERE run_id=? AND seq=?)",
            (body, run_id, seq),
        )
        db.execute(
            "UPDATE events SET type=? WHERE run_id=? AND seq=?",
            (TOOL_REQUESTED if seq == 302 else RUN_FINISHED, run_id, seq),
        )
    db.close()
    with SQLiteStore(path) as store:
        scans = [BlobScan.beside(store), UnvouchedScan()]
        chunked = verify_stored_parallel(store, run_id, workers=2, chunk=CHUNK, scans=scans)
        serial = verify_stored(store, run_id, scans=scans)
        assert chunked.to_dict() == serial.to_dict()
        assert chunked.scanned == serial.scanned
        assert chunked.scanned["unvouched"] == unvouched_in_stored(store.read(run_id, decode=False))


def _refuse_to_load() -> None:
    raise RuntimeError("this scan cannot be unpickled here")


class _PicklesButWontLoad(UnvouchedScan):
    __slots__ = ()

    def __reduce__(self) -> Any:
        return (_refuse_to_load, ())


class _Main(UnvouchedScan):
    __slots__ = ()


_Main.__module__ = "__main__"  # as a scan defined in a script or a notebook


def test_scans_that_cannot_reach_the_workers_are_run_in_this_process(
    scanned_store: tuple[Path, str],
) -> None:
    """A scan whose type lives in ``__main__`` (which spawned workers do not import), or one
    that a worker cannot unpickle, must not leave the pool starting workers for ever: the
    run is verified and scanned in this process, with the same results."""
    path, run_id = scanned_store
    with _alarm(120), SQLiteStore(path) as store:
        expected = verify_stored(store, run_id, scans=[UnvouchedScan()])
        for scan in (_Main(), _PicklesButWontLoad()):
            got = verify_stored_parallel(store, run_id, workers=2, chunk=CHUNK, scans=[scan])
            assert got.to_dict() == expected.to_dict()
            assert got.scanned == expected.scanned
            every = list(verify_all_parallel(store, workers=2, scans=[scan]))
            assert {r.run_id: r.scanned for r in every}[run_id] == expected.scanned


def test_a_run_read_only_in_part_still_has_its_blobs_checked_by_tacho_verify(
    tmp_path: Path,
) -> None:
    """A run whose read fails part way (its report fails) gives its scans nothing; ``tacho
    verify`` then checks its blobs on their own, reading only the rows that may name one,
    as it did before the blob check joined the verification's read."""
    path = tmp_path / "partial.db"
    blobs = BlobStore.beside(str(path))
    ref = blobs.put(b"hello", media_type="text/plain")
    with SQLiteStore(path) as store:
        store.append(
            build_run(
                "bad", 2000, status="ok", payload=lambda s: {"files": [ref]} if s == 2 else {}
            )
        )
    db = _forger(path)
    db.execute("UPDATE events SET seq='z' WHERE run_id='bad' AND seq=1999")
    db.close()
    with SQLiteStore(path) as store:
        report = verify_stored(store, "bad", scans=[BlobScan.beside(store)])
        assert not report.ok
        assert report.scanned == {"blobs": None}
    for workers in ("1", "2"):
        result = CliRunner().invoke(
            cli, ["--store", str(path), "verify", "--all", "--workers", workers, "--json"]
        )
        assert result.exit_code == 1, result.output
        (run,) = json.loads(result.stdout)["runs"]
        assert run["blobs"]["verified"] == [ref["$blob"]]


def test_a_worker_that_cannot_open_the_store_fails_its_tasks_instead_of_restarting(
    tmp_path: Path,
) -> None:
    """The store's file moved away after this process opened it: each spawned worker fails
    to open it, and must fail the tasks it is given (the runs are then verified here) rather
    than raise in its initializer, which makes the pool start workers for ever."""
    path = tmp_path / "moved.db"
    with SQLiteStore(path) as store:
        for i in range(6):
            store.append(build_run(f"run-{i}", 30, status="ok"))
    store = SQLiteStore(path)
    try:
        expected = [r.to_dict() for r in verify_all(store)]
        path.rename(tmp_path / "elsewhere.db")  # this process keeps its open file
        with _alarm(120):
            got = [r.to_dict() for r in verify_all_parallel(store, workers=2)]
        assert got == expected
    finally:
        store.close()


def test_a_run_finished_listing_a_number_lists_nothing() -> None:
    """A forged ``"unvouched": 5`` is not a list of calls: nothing is listed, nothing fails."""
    store = MemoryStore()
    events, prev = [], None
    for seq, (kind, payload) in enumerate(
        [
            (EventType.RUN_STARTED.value, {}),
            (MODEL_RESPONSE, _answer(0, ["a"])),
            (RUN_FINISHED, {"status": "ok", "unvouched": 5}),
        ]
    ):
        event = new_event(
            run_id="r", seq=seq, type=kind, actor="t", payload=payload, prev_hash=prev
        )
        prev = event.hash
        events.append(event)
    store.append(events)
    expected = unvouched_in_stored(store.read("r", decode=False))
    assert [(c.tool, c.seq) for c in expected] == [("a", 1)]  # the answer's call, unmade
    assert verify_stored(store, "r", scans=[UnvouchedScan()]).scanned == {"unvouched": expected}


class _InAWorker(UnvouchedScan):
    """An unvouched-calls scan that does :meth:`in_worker` first when it runs in a worker
    process (in this process it is the plain scan)."""

    __slots__ = ()

    def in_worker(self) -> None:
        raise NotImplementedError

    def begin(self) -> Any:
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            self.in_worker()
        return super().begin()


class _DiesInAWorker(_InAWorker):
    """Its worker process dies as it starts reading (as one the kernel's out-of-memory
    killer ends would)."""

    __slots__ = ()

    def in_worker(self) -> None:
        import os

        os._exit(3)


def test_a_worker_that_dies_mid_task_leaves_its_runs_to_this_process(
    scanned_store: tuple[Path, str],
) -> None:
    """A worker process that dies while it holds a task (killed, out of memory) must not leave
    the verification waiting for ever on a result that will never come: the pool is broken,
    every run it held is verified and scanned here, with the serial results. In
    ``verify_all_parallel`` the small runs' groups break the pool and the large run's chunks
    then find it broken."""
    path, run_id = scanned_store
    with _alarm(120), SQLiteStore(path) as store:
        expected = verify_stored(store, run_id, scans=[UnvouchedScan()])
        assert expected.scanned["unvouched"]
        counted: list[int] = []
        got = verify_stored_parallel(
            store,
            run_id,
            workers=2,
            chunk=CHUNK,
            scans=[_DiesInAWorker()],
            progress=counted.append,
        )
        assert got.to_dict() == expected.to_dict()
        assert got.scanned == expected.scanned
        assert sum(counted) == expected.events
        dying = [_DiesInAWorker()]
        every = list(verify_all_parallel(store, workers=2, chunk=CHUNK, scans=dying))
        assert [r.to_dict() for r in every] == [r.to_dict() for r in verify_all(store)]
        assert {r.run_id: r.scanned for r in every}[run_id] == expected.scanned


class _SleepsInAWorker(_InAWorker):
    """It holds its worker for two minutes (a task far longer than the caller waits for)."""

    __slots__ = ()

    def in_worker(self) -> None:
        import time

        time.sleep(120)


def test_an_interrupted_verification_ends_its_workers_at_once(
    scanned_store: tuple[Path, str],
) -> None:
    """An exception in this process while workers hold tasks (Ctrl-C, a timeout) ends the
    workers then and there: none is left running its task after the call has returned."""
    import multiprocessing
    import time

    path, run_id = scanned_store
    before = set(multiprocessing.active_children())
    workers: set[Any] = set()

    def interrupt(*_: object) -> None:
        workers.update(set(multiprocessing.active_children()) - before)
        raise KeyboardInterrupt

    with _alarm(2, interrupt), SQLiteStore(path) as store, pytest.raises(KeyboardInterrupt):
        verify_stored_parallel(store, run_id, workers=3, chunk=CHUNK, scans=[_SleepsInAWorker()])
    assert len(workers) == 2  # both spawned workers at work when the interrupt came

    def feeders() -> list[threading.Thread]:
        return [
            t
            for t in threading.enumerate()
            if t.name == "tachograph-verify-feeder" and t.is_alive()
        ]

    deadline = time.monotonic() + 20
    while (any(w.is_alive() for w in workers) or feeders()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if w.is_alive()]
    assert not feeders()  # the thread that handed out the tasks ended with them
    # ended by this process, not left to finish their two-minute tasks
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2


_BEGUN_HERE: list[int] = []
"""For each chunk :class:`_SlowHere` began in this process: the processes this one had
started and that were alive."""


class _SlowHere(UnvouchedScan):
    """The unvouched-calls scan, a tenth of a second slower a chunk in this process (so that
    the worker has started and taken chunks before this process can take them all); it
    notes each chunk it begins here in :data:`_BEGUN_HERE`."""

    __slots__ = ()

    def begin(self) -> Any:
        import multiprocessing
        import time

        if multiprocessing.parent_process() is None:
            _BEGUN_HERE.append(len(multiprocessing.active_children()))
            time.sleep(0.1)
        return super().begin()


def test_this_process_verifies_its_share_beside_its_workers(
    scanned_store: tuple[Path, str],
) -> None:
    """``workers=2`` is two processes at work: this one and one spawned worker. The worker
    takes the chunks from the first on, this process from the last back, and the report and
    the scans are the serial ones."""
    import multiprocessing

    path, run_id = scanned_store
    before = len(multiprocessing.active_children())
    with _alarm(120), SQLiteStore(path) as store:
        expected = verify_stored(store, run_id, scans=[UnvouchedScan()])
        assert expected.scanned["unvouched"]
        _BEGUN_HERE.clear()
        counted: list[int] = []
        got = verify_stored_parallel(
            store, run_id, workers=2, chunk=CHUNK, scans=[_SlowHere()], progress=counted.append
        )
    assert got.to_dict() == expected.to_dict()
    assert got.scanned == expected.scanned
    assert sum(counted) == expected.events
    # eight chunks: some here (the worker needs a tenth of a second to start), not all (it
    # was handed the first two as this process began the last)
    assert 1 <= len(_BEGUN_HERE) <= 6
    assert set(_BEGUN_HERE) == {before + 1}  # one worker beside this process


def _reports_progress(source: Any, task: int, n: int) -> None:
    """A task that reports ``n`` events of progress and fails (its size is then topped up)."""
    source.report(task, n)


def test_progress_sent_late_is_not_counted_by_the_next_call_on_the_pool(tmp_path: Path) -> None:
    """A task's progress can still be in the channel when its result is in: one call on the
    pool read it after it returned, and the next call (its task numbers start at 0 again)
    counted it as its own, so ``verify_all_parallel``'s total overshot (about 1 call in
    100 here). Every call's total is exact."""
    from tachograph.store.parallel import _Pool

    path = tmp_path / "empty.db"
    wrong = []
    with SQLiteStore(path) as store, _Pool(store, "sqlite:///" + str(path), 3) as pool:
        for call in range(500):
            got: list[int] = []
            pool.run([(_reports_progress, (7,)) for _ in range(8)], [7] * 8, got.append)
            if sum(got) != 56:
                wrong.append((call, sum(got)))
    assert wrong == []


def _exits_in_a_worker(source: Any, task: int) -> int:
    """A task whose worker process dies (in this process it takes a twentieth of a second,
    time for the feeder to hand tasks out, and answers its number)."""
    import multiprocessing
    import os
    import time

    if multiprocessing.parent_process() is not None:
        os._exit(3)
    time.sleep(0.05)
    return task


def test_a_task_the_broken_pool_forgot_is_not_waited_for(tmp_path: Path) -> None:
    """Before Python 3.12 the executor fails and forgets its tasks when a worker dies without
    the lock ``submit`` holds: a task handed out at that moment is never done (a future that
    stays pending, as the one made here). The call still returns: once the pool is broken
    and its manager gone, the tasks it did not finish fail (``None``), and the tasks not
    handed out are run in this process."""
    from concurrent.futures import Future

    from tachograph.store.parallel import _Pool

    path = tmp_path / "empty.db"
    sent: list[Any] = []
    forgotten: list[Future[Any]] = []
    with _alarm(60), SQLiteStore(path) as store, _Pool(store, "sqlite:///" + str(path), 2) as pool:
        submit = pool.pool.submit

        def loses_all_but_the_first(fn: Any, *args: Any) -> Future[Any]:
            if not sent:
                sent.append(fn)
                return submit(fn, *args)  # the worker dies on it: the pool breaks
            forgotten.append(Future())
            return forgotten[-1]

        pool.pool.submit = loses_all_but_the_first  # type: ignore[method-assign]
        got = pool.run([(_exits_in_a_worker, ()) for _ in range(12)], [1] * 12, None)
        assert pool.broken
    assert forgotten  # the feeder handed one out as the pool broke
    assert all(f.cancelled() for f in forgotten)
    assert got[0] is None  # the task its worker died on
    assert all(got[i] is None for i in range(1, 1 + len(forgotten)))  # forgotten: failed
    assert got[1 + len(forgotten) :] == list(range(1 + len(forgotten), 12))  # run here


def _raises_on_call(k: int) -> Any:
    calls = [0]

    def progress(n: int) -> None:
        calls[0] += 1
        if calls[0] == k:
            raise RuntimeError(f"progress call {k}")

    return progress


@pytest.mark.parametrize("k", [1, 2, 3])
def test_an_error_of_the_progress_callback_reaches_the_caller(
    scanned_store: tuple[Path, str], k: int
) -> None:
    """The progress callback runs in this process, also inside the tasks this process runs
    itself: its error is the caller's, not a task's failure (which would have been verified
    again serially and the error lost)."""
    path, run_id = scanned_store
    with (
        _alarm(120),
        SQLiteStore(path) as store,
        pytest.raises(RuntimeError, match=f"progress call {k}"),
    ):
        verify_stored_parallel(
            store,
            run_id,
            workers=2,
            chunk=CHUNK,
            scans=[_SlowHere()],
            progress=_raises_on_call(k),
        )


def test_reports_name_the_store_as_the_caller_opened_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened by a relative path: a worker opens it by its absolute URL, but every
    report names it as the caller's store does, as in one process (``tacho verify --json``
    is the same with workers or without)."""
    monkeypatch.chdir(tmp_path)
    with SQLiteStore("rel.db") as store:
        for i in range(40):
            store.append(build_run(f"r{i:02d}", 3))
        serial = [r.to_dict() for r in verify_all(store)]
        assert {r["source"] for r in serial} == {store.url}
        assert [r.to_dict() for r in verify_all_parallel(store, workers=3)] == serial


def test_a_pool_that_breaks_while_its_workers_start_leaves_the_work_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that dies while the pool still starts the others (its ``submit`` raises
    ``BrokenProcessPool``, as here for the second start): the call does not fail, this
    process verifies everything."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from tachograph.store import parallel

    class BreaksAtTheSecondStart(ProcessPoolExecutor):
        starts = 0

        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if fn is parallel._started:
                type(self).starts += 1
                if type(self).starts == 2:
                    raise BrokenProcessPool("a worker died as the pool started")
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", BreaksAtTheSecondStart)
    with _alarm(60), SQLiteStore(tmp_path / "s.db") as store:
        for i in range(30):
            store.append(build_run(f"r{i:02d}", 3))
        counted: list[int] = []
        got = [r.to_dict() for r in verify_all_parallel(store, workers=3, progress=counted.append)]
        assert got == [r.to_dict() for r in verify_all(store)]
        assert sum(counted) == 90
    assert BreaksAtTheSecondStart.starts == 2
