"""What verification reports about a damaged export: the right run, the right position, the
right check, and each fault once (SPEC section 8).

The files are what ``tacho export --all`` writes for a store of several runs, then damaged as
a reviewer did: a line deleted, moved or made malformed.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from tachograph.cli.app import cli
from tachograph.errors import FormatError
from tachograph.record.jsonl import verify_jsonl
from tachograph.record.verify import Check, Failure, VerifyReport
from tachograph.store import SQLiteStore, verify_stored
from tachograph.testing import build_run

LENGTH = 15
RUNS = ("run-q", "run-r", "run-s")


@pytest.fixture
def exported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The lines of ``tacho export --all``: three intact runs of 15 events, one after another."""
    for name in ("TACHOGRAPH_STORE", "FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    store_path = tmp_path / "store.db"
    with SQLiteStore(store_path) as store:
        for run_id in RUNS:
            store.append(build_run(run_id, LENGTH, status="ok"))
    out = tmp_path / "all.jsonl"
    args = ["--store", str(store_path), "export", "--all", "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    lines = out.read_bytes().splitlines(keepends=True)
    in_order = [run_id for run_id in RUNS for _ in range(LENGTH)]
    assert [json.loads(line)["run_id"] for line in lines] == in_order
    return lines


def _verify(tmp_path: Path, lines: list[bytes]) -> dict[str, VerifyReport]:
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"".join(lines))
    reports = verify_jsonl(path)
    by_run = {r.run_id: r for r in reports if r.run_id is not None}
    assert len(by_run) == len(reports), "a run reported twice, or unnamed"
    return by_run


def _only(report: VerifyReport) -> Failure:
    assert len(report.failures) == 1, [f.message for f in report.failures]
    return report.failures[0]


def test_an_intact_export_verifies(tmp_path: Path, exported: list[bytes]) -> None:
    reports = _verify(tmp_path, exported)
    assert sorted(reports) == sorted(RUNS)
    assert all(r.ok and r.events == LENGTH for r in reports.values())


def test_a_run_that_lost_its_first_line_is_reported_and_not_the_run_before(
    tmp_path: Path, exported: list[bytes]
) -> None:
    damaged = [*exported[:LENGTH], *exported[LENGTH + 1 :]]  # run-r's seq 0
    reports = _verify(tmp_path, damaged)
    assert sorted(reports) == sorted(RUNS)
    assert reports["run-q"].ok
    assert reports["run-q"].events == LENGTH
    assert reports["run-s"].ok
    first = _only(reports["run-r"])
    assert (first.seq, first.line, first.check) == (0, LENGTH + 1, Check.SEQUENCE)
    assert first.message == "seq is 1, expected 0: seq 0 is missing"
    assert reports["run-r"].events == LENGTH - 1


def test_a_line_moved_to_the_end_is_a_line_of_another_run_there(
    tmp_path: Path, exported: list[bytes]
) -> None:
    moved = exported[LENGTH + 5]  # run-r's seq 5, after run-s's last line
    damaged = [*exported[: LENGTH + 5], *exported[LENGTH + 6 :], moved]
    reports = _verify(tmp_path, damaged)
    assert reports["run-q"].ok
    gap = _only(reports["run-r"])
    assert (gap.seq, gap.check) == (5, Check.SEQUENCE)
    assert gap.message == "seq is 6, expected 5: seq 5 is missing"
    stray = _only(reports["run-s"])
    assert (stray.seq, stray.line, stray.check) == (LENGTH, 3 * LENGTH, Check.SEQUENCE)
    assert stray.message == "run_id is 'run-r', not the run's 'run-s': a line of another run"


def test_a_line_of_another_run_in_the_middle_is_reported_once_and_the_chain_goes_on(
    tmp_path: Path, exported: list[bytes]
) -> None:
    stray = exported[LENGTH + 3]  # run-r's seq 3 also among run-s's lines
    damaged = [*exported[: 2 * LENGTH + 7], stray, *exported[2 * LENGTH + 7 :]]
    reports = _verify(tmp_path, damaged)
    assert reports["run-r"].ok
    first = _only(reports["run-s"])
    assert (first.seq, first.check) == (7, Check.SEQUENCE)
    assert "a line of another run" in first.message
    assert reports["run-s"].events == LENGTH + 1


def test_one_deleted_event_is_one_failure(tmp_path: Path, exported: list[bytes]) -> None:
    damaged = [*exported[: LENGTH + 4], *exported[LENGTH + 5 :]]  # run-r's seq 4
    reports = _verify(tmp_path, damaged)
    first = _only(reports["run-r"])
    assert (first.seq, first.line, first.check) == (4, LENGTH + 5, Check.SEQUENCE)
    assert first.message == "seq is 5, expected 4: seq 4 is missing"
    assert reports["run-q"].ok
    assert reports["run-s"].ok


def test_after_a_gap_the_later_events_are_still_checked(
    tmp_path: Path, exported: list[bytes]
) -> None:
    # seqs 4 to 6 deleted, and seq 10's hash edited: the gap once, then check 3 at seq 10
    edited = json.loads(exported[LENGTH + 10])
    edited["hash"] = "sha256:" + "ab" * 32
    tampered = json.dumps(edited).encode() + b"\n"
    damaged = [
        *exported[: LENGTH + 4],
        *exported[LENGTH + 7 : LENGTH + 10],
        tampered,
        *exported[LENGTH + 11 :],
    ]
    report = _verify(tmp_path, damaged)["run-r"]
    assert [(f.seq, f.check, f.message.split(":")[0]) for f in report.failures] == [
        (4, Check.SEQUENCE, "seq is 7, expected 4"),
        (7, Check.HASH, "hash is sha256"),  # and seq 11 links to seq 10's envelope: no more
    ]
    assert "seqs 4 to 6 are missing (3 events)" in report.failures[0].message


def test_a_repeated_line_is_one_failure(tmp_path: Path, exported: list[bytes]) -> None:
    damaged = [*exported[: LENGTH + 4], exported[LENGTH + 3], *exported[LENGTH + 4 :]]
    first = _only(_verify(tmp_path, damaged)["run-r"])
    assert (first.seq, first.check) == (4, Check.SEQUENCE)
    assert first.message == "seq is 3, expected 4: seq 3 again, or out of order"


def _edited(line: bytes, **changes: object) -> bytes:
    data = json.loads(line)
    data.update(changes)
    return json.dumps(data).encode() + b"\n"


def _without(line: bytes, key: str) -> bytes:
    data = json.loads(line)
    del data[key]
    return json.dumps(data).encode() + b"\n"


MALFORMED = {
    "not JSON": lambda line: b'{"seq": 4, \n',
    "a missing key": lambda line: _without(line, "seed"),
    "a bad timestamp": lambda line: _edited(line, ts="yesterday"),
    "an unreadable hash": lambda line: _edited(line, hash="sha256:not-hex"),
    "an unreadable seq": lambda line: _edited(line, seq="4"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_line_does_not_fail_the_next_one(
    tmp_path: Path, exported: list[bytes], kind: str
) -> None:
    damaged = list(exported)
    damaged[LENGTH + 4] = MALFORMED[kind](exported[LENGTH + 4])
    reports = _verify(tmp_path, damaged)
    first = _only(reports["run-r"])
    assert (first.seq, first.line, first.check) == (4, LENGTH + 5, Check.FORMAT)
    assert reports["run-q"].ok
    assert reports["run-s"].ok


def test_a_malformed_line_with_a_readable_hash_is_chained_on(
    tmp_path: Path, exported: list[bytes]
) -> None:
    # the malformed line's own hash is what its successor must link to: a successor that
    # does not is still caught
    damaged = list(exported)
    damaged[LENGTH + 4] = _edited(exported[LENGTH + 4], ts="yesterday", hash="sha256:" + "cd" * 32)
    report = _verify(tmp_path, damaged)["run-r"]
    assert [(f.seq, f.check) for f in report.failures] == [(4, Check.FORMAT), (5, Check.LINK)]
    assert report.failures[1].message.endswith("expected sha256:" + "cd" * 32)


def test_tacho_verify_file_names_the_damaged_run(tmp_path: Path, exported: list[bytes]) -> None:
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"".join([*exported[:LENGTH], *exported[LENGTH + 1 :]]))
    result = CliRunner().invoke(cli, ["verify", str(path)])
    assert result.exit_code == 1
    assert "run-q: verified, 15 events" in result.output
    assert (
        "run-r: FAILED at seq 0 (line 16), check 2 (sequence, run and tenant): "
        "seq is 1, expected 0: seq 0 is missing"
    ) in result.output
    assert "2 of 3 run(s) verified" in result.output


def _tamper(path: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='trigger'"):
            db.execute(f"DROP TRIGGER {name}")
        for sql, args in statements:
            db.execute(sql, args)
    finally:
        db.close()


def test_a_malformed_stored_row_does_not_fail_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        store.append(build_run("run-r", LENGTH, status="ok"))
    _tamper(path, ("UPDATE events SET ts='yesterday' WHERE run_id='run-r' AND seq=4", ()))
    with SQLiteStore(path) as store:
        report = verify_stored(store, "run-r")
    first = _only(report)
    assert (first.seq, first.check) == (4, Check.FORMAT)


def test_a_stored_body_that_is_not_json_names_its_run_and_seq(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with SQLiteStore(path) as store:
        store.append(build_run("run-r", LENGTH, status="ok"))
    _tamper(
        path,
        (
            "UPDATE payloads SET body=? WHERE id=(SELECT id FROM events "
            "WHERE run_id='run-r' AND seq=4)",
            (b"{not json",),
        ),
    )
    with SQLiteStore(path) as store:
        events = store.read("run-r", tenant="default")
        assert [e.seq for e in itertools.islice(events, 4)] == [0, 1, 2, 3]
        with pytest.raises(FormatError, match=r"run 'run-r' seq 4: the stored payload is not"):
            next(events)
        report = verify_stored(store, "run-r")
    first = _only(report)
    assert (first.seq, first.check) == (4, Check.PAYLOAD)
