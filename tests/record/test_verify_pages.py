"""verify_run checks rows a page at a time (LineChecker.feed_many; compiled, one call per page
where the helpers serve): the reports, the progress calls and what a read that fails halfway
leaves must be those of checking the rows one by one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tachograph.record import verify
from tachograph.record.event import Event, new_event
from tachograph.record.rows import StoredRow


def _rows(n: int) -> list[StoredRow]:
    rows, prev = [], None
    for seq in range(n):
        e = new_event(run_id="run-p", seq=seq, type="decision", actor="agent",
                      payload={"i": seq, "f": 2.0}, prev_hash=prev)  # fmt: skip
        rows.append(StoredRow._make(verify._ROW_OF(e)))
        prev = e.hash
    return rows


ROWS = _rows(2_600)


def _one_by_one(items: list[Any], failed_read: str | None = None) -> dict[str, Any]:
    """The report of feeding each item on its own, as verify_run did before pages."""
    checker = verify.LineChecker()
    for item in items:
        if isinstance(item, Event):
            checker.feed_event(item)
        else:
            checker.feed_row(item)
    if failed_read is not None:
        checker.feed_malformed(f"the store could not read this run: {failed_read}")
    return checker.report().to_dict()


def _failing(rows: list[StoredRow], at: int) -> Iterator[StoredRow]:
    yield from rows[:at]
    raise ValueError("database disk image is malformed")


@pytest.mark.parametrize("at", [0, 1, 999, 1000, 1001, 1500, 2000, 2599])
def test_a_read_that_fails_halfway_checks_what_was_read_then_fails(at: int) -> None:
    calls: list[int] = []
    report = verify.verify_run(_failing(ROWS, at), progress=calls.append).to_dict()
    expected = (
        _one_by_one(ROWS[:at], failed_read="database disk image is malformed") if at else None
    )
    assert report["status"] == "failed"
    if expected is not None:
        assert report == expected
    assert calls == [1000] * (at // 1000)


def test_progress_comes_every_thousand_rows_and_the_rest_at_the_end() -> None:
    calls: list[int] = []
    report = verify.verify_run(iter(ROWS), progress=calls.append)
    assert report.ok
    assert calls == [1000, 1000, 600]
    calls.clear()
    assert verify.verify_run(ROWS[:2000], progress=calls.append).ok
    assert calls == [1000, 1000]


@pytest.mark.parametrize("bad_at", [0, 1, 999, 1000, 1001, 2599])
def test_a_tampered_row_on_either_side_of_a_page_edge_is_reported_as_row_by_row(
    bad_at: int,
) -> None:
    rows: list[Any] = list(ROWS)
    rows[bad_at] = rows[bad_at]._replace(salt="00" * 16)
    for given in (rows, iter(rows)):
        report = verify.verify_run(given).to_dict()
        assert report == _one_by_one(rows)
        assert report["status"] == "failed"
        assert report["first_failure"]["seq"] == bad_at


def test_loaded_events_and_rows_mixed_verify_as_one_run() -> None:
    import orjson

    from tachograph.record.event import stored_event

    items: list[Any] = list(ROWS[:50])
    for i in range(0, 50, 3):
        r = ROWS[i]
        items[i] = stored_event(1, *r[:15], orjson.loads(r.payload_bytes), r.salt,
                                r.payload_bytes)  # fmt: skip
    report = verify.verify_run(items, decoded=True)
    assert report.ok
    assert report.to_dict() == _one_by_one(items)
