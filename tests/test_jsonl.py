"""JSONL interchange (SPEC section 4): export exactly, import only what verifies, dedupe."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tachograph.errors import FormatError, VerificationFailed
from tachograph.record.canonical import canonical
from tachograph.record.jsonl import export_run, import_jsonl, read_jsonl, verify_jsonl, write_events
from tachograph.record.verify import Check
from tachograph.store import SQLiteStore
from tachograph.testing import build_run

RUN_ID = "run_2026_10_15_0042"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "store.db")
    try:
        yield store
    finally:
        store.close()


def _values(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def _canonical_lines(data: bytes) -> list[bytes]:
    return [canonical(line) for line in _values(data)]


@pytest.mark.parametrize("name", ["refund_run.jsonl", "refund_run_erased.jsonl"])
def test_export_of_an_imported_vector_reproduces_its_lines(
    store: SQLiteStore, vectors_dir: Path, name: str
) -> None:
    path = vectors_dir / "events" / name
    report = import_jsonl(store, path)
    assert (report.events, report.written, report.duplicates) == (11, 11, 0)
    assert [r.ok for r in report.runs] == [True]
    out = io.BytesIO()
    assert export_run(store, RUN_ID, out) == 11
    exported = out.getvalue()
    original = path.read_bytes()
    assert _values(exported) == _values(original)
    assert _canonical_lines(exported) == _canonical_lines(original)  # types too: 1 vs 1.0 etc.
    assert all(line.endswith(b"\n") for line in exported.splitlines(keepends=True))
    assert [json.loads(line)["seq"] for line in exported.splitlines()] == list(range(11))
    # and the export verifies on its own
    assert [r.ok for r in verify_jsonl(io.BytesIO(exported))] == [True]


def test_erased_payloads_are_exported_as_null(store: SQLiteStore, vectors_dir: Path) -> None:
    import_jsonl(store, vectors_dir / "events" / "refund_run_erased.jsonl")
    out = io.BytesIO()
    export_run(store, RUN_ID, out)
    lines = _values(out.getvalue())
    assert [(line["payload"], line["salt"]) for line in lines[1:3]] == [(None, None)] * 2
    assert all(line["payload"] is not None for i, line in enumerate(lines) if i not in (1, 2))
    assert store.verify(RUN_ID).erased == (1, 2)


def test_reimport_dedupes(store: SQLiteStore, vectors_dir: Path) -> None:
    path = vectors_dir / "events" / "refund_run.jsonl"
    import_jsonl(store, path)
    again = import_jsonl(store, path)
    assert (again.events, again.written, again.duplicates) == (11, 0, 11)
    assert store.count_events() == 11
    # the erased twin has the same envelopes: it dedupes too (and erases nothing)
    twin = import_jsonl(store, vectors_dir / "events" / "refund_run_erased.jsonl")
    assert (twin.written, twin.duplicates) == (0, 11)
    assert store.verify(RUN_ID).erased == ()


def test_import_from_a_stream_and_progress(store: SQLiteStore, vectors_dir: Path) -> None:
    data = (vectors_dir / "events" / "refund_run.jsonl").read_bytes()
    ticks: list[int] = []
    report = import_jsonl(store, io.BytesIO(data), progress=ticks.append)
    assert report.written == 11
    assert sum(ticks) == 11
    assert report.to_dict()["written"] == 11


def test_a_tampered_file_stores_nothing_and_names_run_seq_and_check(
    store: SQLiteStore, vectors_dir: Path, invalid_case: str
) -> None:
    invalid = vectors_dir / "events" / "invalid"
    want = json.loads((invalid / "expected.json").read_text())[invalid_case]
    with pytest.raises(VerificationFailed) as info:
        import_jsonl(store, invalid / f"{invalid_case}.jsonl")
    assert store.count_events() == 0
    assert store.runs() == []
    err = info.value
    [report] = err.reports
    assert report is err.report
    assert report.run_id == RUN_ID
    first = report.first_failure
    assert first is not None
    assert (first.seq, int(first.check)) == (want["first_bad_seq"], want["check"])
    message = str(err)
    assert "nothing stored" in message
    assert RUN_ID in message
    assert f"seq {want['first_bad_seq']}" in message
    assert f"check {want['check']}" in message


def test_one_bad_run_among_good_ones_stores_nothing(store: SQLiteStore, vectors_dir: Path) -> None:
    good = b"".join(e.to_json() + b"\n" for e in build_run("good-run", 5))
    bad = (vectors_dir / "events" / "invalid" / "payload_edited.jsonl").read_bytes()
    also_good = b"".join(e.to_json() + b"\n" for e in build_run("later-run", 3))
    with pytest.raises(VerificationFailed) as info:
        import_jsonl(store, io.BytesIO(good + bad + also_good))
    assert store.count_events() == 0
    assert [
        (r.run_id, r.first_failure.seq if r.first_failure else None) for r in info.value.reports
    ] == [(RUN_ID, 6)]


def test_a_malformed_line_is_refused_with_check_1(store: SQLiteStore) -> None:
    events = build_run("run-a", 3)
    data = events[0].to_json() + b"\n" + b"{not json\n" + events[2].to_json() + b"\n"
    with pytest.raises(VerificationFailed) as info:
        import_jsonl(store, io.BytesIO(data))
    first = info.value.report.first_failure
    assert (first.seq, first.check, first.line) == (1, Check.FORMAT, 2)
    assert store.count_events() == 0


def test_multi_run_export_and_import(store: SQLiteStore, tmp_path: Path) -> None:
    runs = {
        ("default", "run-a"): build_run("run-a", 4, status="ok"),
        ("acme", "run-b"): build_run("run-b", 2500, tenant="acme"),
        ("globex", "run-b"): build_run("run-b", 3, tenant="globex"),  # same id, other tenant
        ("acme", "run-c"): build_run("run-c", 1, tenant="acme"),
    }
    for events in runs.values():
        store.append(events)
    path = tmp_path / "all.jsonl"
    with path.open("wb") as out:
        for tenant, run_id in runs:
            export_run(store, run_id, out, tenant=tenant)
    reports = verify_jsonl(path)
    assert [(r.tenant, r.run_id, r.events, r.ok) for r in reports] == [
        (tenant, run_id, len(events), True) for (tenant, run_id), events in runs.items()
    ]
    other = SQLiteStore(tmp_path / "other.db")
    try:
        report = import_jsonl(other, path)
        total = sum(len(e) for e in runs.values())
        assert (report.events, report.written, report.duplicates) == (total, total, 0)
        for (tenant, run_id), events in runs.items():
            assert list(other.read(run_id, tenant=tenant)) == events
        assert all(r.ok for r in other.verify_all())
        again = import_jsonl(other, path)
        assert (again.written, again.duplicates) == (0, total)
    finally:
        other.close()
    assert [len(run) for run in read_jsonl(path)] == [len(e) for e in runs.values()]


def test_read_jsonl_refuses_a_tampered_file(vectors_dir: Path) -> None:
    with pytest.raises(VerificationFailed) as info:
        read_jsonl(vectors_dir / "events" / "invalid" / "hash_edited.jsonl")
    assert info.value.report.first_failure.seq == 7


def test_write_events_then_read_jsonl_round_trips() -> None:
    events = build_run("run-a", 6, status="error")
    out = io.BytesIO()
    assert write_events(events, out) == 6
    [back] = read_jsonl(io.BytesIO(out.getvalue()))
    assert back == events


def test_a_missing_file_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FormatError) as info:
        verify_jsonl(tmp_path / "nope.jsonl")
    assert info.value.location == str(tmp_path / "nope.jsonl")
