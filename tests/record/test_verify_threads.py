"""A page checked on a thread of its own (``native.verify_start``): the compiled checks of
``verify_many`` over a page, run without the GIL while the next page is read. Whatever the
thread's timing, it must never vouch for an item ``verify_many`` would not, and what it leaves
must give the same report when the Python path takes it up."""

from __future__ import annotations

import gc
import hashlib
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tachograph.record import compiled, verify
from tachograph.record.event import new_event, stored_event
from tachograph.record.rows import StoredRow

native = pytest.importorskip(
    "tachograph.record.native", reason="the compiled helpers are not built here"
)
pytestmark = pytest.mark.skipif(
    verify._verify_start is None or compiled.SHA256_FROM is None,
    reason="no thread can check a page here (no compiled helpers, or no OpenSSL SHA-256)",
)

# Payloads of every kind the compiled JCS meets: integral floats, a fraction whose shortest
# digits need Python's float conversions (the thread leaves that row to the GIL's path),
# non-ASCII keys, escapes, nesting.
_PAYLOADS = [
    {"i": 1, "amount": 25.0, "é": [1.0, 0.5]},
    {"名前": "claude", "note": 'a "b"\n', "z": {"y": [], "x": {}}},
    {"sum": 0.1 + 0.2, "big": 1e300},
    {"ok": True, "n": None, "list": [1, 2, 3]},
]


def _chain(n: int, *, run_id: str = "run-t", slow_every: int = 0) -> list[StoredRow]:
    rows: list[StoredRow] = []
    prev = None
    for seq in range(n):
        payload = dict(_PAYLOADS[seq % 2 if not slow_every or seq % slow_every else 2])
        payload["seq"] = seq
        e = new_event(run_id=run_id, seq=seq, type="decision", actor="agent", payload=payload,
                      prev_hash=prev)  # fmt: skip
        rows.append(StoredRow._make(verify._ROW_OF(e)))
        prev = e.hash
    return rows


def _event(row: tuple[Any, ...]) -> Any:
    return stored_event(1, *row[:15], orjson.loads(row[15]), row[16], row[15])


_LONG = _chain(600)


def _tamper(rows: list[Any], at: int, change: str) -> None:
    row = list(rows[at]) if isinstance(rows[at], tuple) else None
    if change == "event":
        rows[at] = _event(rows[at])
        return
    if change == "other":
        rows[at] = dict(enumerate(rows[at]))
        return
    assert row is not None
    if change == "salt":
        row[16] = "00" * 16
    elif change == "hash":
        row[14] = "sha256:" + "1" * 64
    elif change == "seq":
        row[2] = 10_000
    elif change == "run":
        row[1] = "run-other"
    elif change == "body":
        row[15] = row[15].replace(b'"seq"', b'"qes"')
    rows[at] = tuple(row)


def _job_answer(items: list[Any], start: int, prev: Any, pos: int) -> tuple[int, Any]:
    job = native.verify_start(items, start, prev, pos, "run-t", "default")
    if job is None:
        return 0, prev
    assert 1 <= job.taken <= len(items) - start
    count, last = job.wait()
    assert 0 <= count <= job.taken
    assert job.wait() == (count, last)  # asked again, the same answer
    return count, last


def _hash_of(item: Any) -> Any:
    if isinstance(item, tuple):
        return item[14]
    return getattr(item, "hash", None)


def _holds_to_verify_many(items: list[Any], start: int, *, exact: bool) -> None:
    prev = _hash_of(items[start - 1]) if start else None
    want = native.verify_many(items, start, prev, start, "run-t", "default")
    count, last = _job_answer(items, start, prev, start)
    if exact:
        assert (count, last) == want
        return
    # it may stop sooner (a row it leaves to the GIL's path): never later, and the rest,
    # taken up by verify_many where it stopped, gives verify_many's answer
    assert count <= want[0]
    rest = native.verify_many(items, start + count, last, start + count, "run-t", "default")
    assert (count + rest[0], rest[1] if rest[0] else last) == want


@given(
    at=st.lists(st.integers(0, len(_LONG) - 1), max_size=3),
    change=st.sampled_from(["salt", "hash", "seq", "run", "body", "event", "other"]),
    start=st.integers(0, 40),
)
@example(at=[], change="salt", start=0)
@example(at=[300], change="hash", start=0)  # at the half wait() takes on
@example(at=[299], change="salt", start=0)
@example(at=[450], change="body", start=0)  # in the half wait() checks
@example(at=[599], change="seq", start=0)
@settings(max_examples=80, deadline=None)
def test_a_job_answers_as_verify_many(at: list[int], change: str, start: int) -> None:
    rows: list[Any] = list(_LONG)
    for i in sorted(set(at)):
        _tamper(rows, i, change)
    # an item it cannot read ends what the job takes; a loaded event it reads as a row
    _holds_to_verify_many(rows, start, exact=change != "other")


@pytest.mark.parametrize("slow_every", [1, 7, 250])
def test_rows_left_to_the_gil_path_are_taken_up_where_the_job_stopped(slow_every: int) -> None:
    rows = _chain(400, slow_every=slow_every)
    _holds_to_verify_many(list(rows), 0, exact=False)
    first_slow = next(i for i in range(400) if i % slow_every == 0)
    count, _ = _job_answer(list(rows), 0, None, 0)
    assert count == first_slow  # 0.1 + 0.2 needs Python's float conversion: not without the GIL


@pytest.mark.parametrize("bad_at", [0, 1, 299, 300, 301, 598, 599])
def test_whatever_the_timing_the_answer_is_the_same(bad_at: int) -> None:
    """wait() checks the second half of what is left itself while the thread checks the
    first: which of the two reaches a row first varies from run to run, the answer may not."""
    rows: list[Any] = list(_LONG)
    _tamper(rows, bad_at, "salt")
    want = native.verify_many(rows, 0, None, 0, "run-t", "default")
    assert want[0] == bad_at
    for _ in range(30):
        assert _job_answer(rows, 0, None, 0) == want
    for _ in range(30):  # waited for at once: the thread has barely begun
        job = native.verify_start(rows, 0, None, 0, "run-t", "default")
        assert job.wait() == want


def test_a_job_holds_what_it_reads_until_it_is_gone() -> None:
    rows = _chain(300)
    want = native.verify_many(list(rows), 0, None, 0, "run-t", "default")
    items: list[Any] = [_event(r) for r in rows]
    job = native.verify_start(items, 0, None, 0, "run-t", "default")
    del items, rows
    gc.collect()
    junk = [bytes(200) + bytes([i % 256]) for i in range(20_000)]  # reuse freed memory
    assert job.wait() == want
    del junk


def test_a_job_dropped_before_it_is_waited_for_ends_cleanly() -> None:
    rows = list(_chain(300))
    for _ in range(50):
        job = native.verify_start(rows, 0, None, 0, "run-t", "default")
        del job  # its thread ends before what it reads is let go
    assert _job_answer(rows, 0, None, 0)[0] == 300


def test_nothing_to_read_or_no_openssl_means_no_job() -> None:
    rows = list(_chain(5))
    assert native.verify_start([], 0, None, 0, "run-t", "default") is None
    assert native.verify_start(rows, 5, rows[4][14], 5, "run-t", "default") is None
    assert native.verify_start([{"not": "a row"}], 0, None, 0, "run-t", "default") is None
    try:
        native.bind_sha256(None)  # hashlib's SHA-256 needs the GIL
        assert native.verify_start(rows, 0, None, 0, "run-t", "default") is None
        assert verify.verify_run(iter(rows)).ok
    finally:
        native.bind_sha256(compiled.SHA256_FROM)
    with pytest.raises(TypeError):
        native.verify_start(tuple(rows), 0, None, 0, "run-t", "default")
    with pytest.raises(ValueError, match="negative"):
        native.verify_start(rows, -1, None, 0, "run-t", "default")
    with pytest.raises(TypeError):
        native.VerifyJob()


def _one_by_one(items: list[Any]) -> dict[str, Any]:
    checker = verify.LineChecker()
    for item in items:
        checker.feed_row(item)
    return checker.report().to_dict()


_PAGED = _chain(3500, slow_every=97)


@pytest.mark.parametrize("bad_at", [None, 0, 999, 1000, 1500, 2999, 3499])
def test_verify_run_over_pages_reports_as_row_by_row(bad_at: int | None) -> None:
    rows: list[Any] = list(_PAGED)
    if bad_at is not None:
        _tamper(rows, bad_at, "hash")
    calls: list[int] = []
    kept: list[Any] = []
    report = verify.verify_run(iter(rows), progress=calls.append, keep=kept, overlap=True).to_dict()
    assert report == _one_by_one(rows)
    assert report == verify.verify_run(iter(rows)).to_dict()
    assert calls == [1000, 1000, 1000, 500]
    assert kept == rows
    assert (report["status"] == "verified") == (bad_at is None)


def _failing(rows: list[Any], at: int) -> Any:
    yield from rows[:at]
    raise ValueError("database disk image is malformed")


@pytest.mark.parametrize("at", [1, 999, 1000, 1001, 2500])
def test_a_read_that_fails_halfway_is_reported_as_without_threads(at: int) -> None:
    calls: list[int] = []
    kept: list[Any] = []
    report = verify.verify_run(
        _failing(list(_PAGED), at), progress=calls.append, keep=kept, overlap=True
    )
    assert report.to_dict() == verify.verify_run(_failing(list(_PAGED), at)).to_dict()
    assert report.to_dict()["status"] == "failed"
    assert calls == [1000] * (at // 1000)
    assert kept == list(_PAGED[:at])


def test_the_compiled_digests_are_hashlibs() -> None:
    # the thread hashes with OpenSSL's SHA-256 directly: the same digest as hashlib's
    assert native.sha256(b"abc") == hashlib.sha256(b"abc").digest()
