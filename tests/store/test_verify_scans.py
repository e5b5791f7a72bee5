"""Scans read beside verification (``tachograph.record.scan``) against the readings they stand
for: ``BlobScan`` against ``check_stored_blobs``, ``UnvouchedScan`` against
``unvouched_in_stored``, whatever the rows and however a run is cut into chunks; then in real
worker processes (a long run in chunks, small runs in groups), and through ``tacho verify``.
"""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
import tempfile
from collections.abc import Sequence
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
        "blob": st.sampled_from([None, None, None, "present", "missing", "damaged"]),
        # what is done to the stored bytes afterwards
        "stored": st.sampled_from(
            ["as is"] * 6 + ["erased", "not json", "escaped key", "text", "null"]
        ),
    }
)


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
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
            db.execute(f"DROP TRIGGER {name}")
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
    db = sqlite3.connect(path, isolation_level=None)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
        db.execute(f"DROP TRIGGER {name}")
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
