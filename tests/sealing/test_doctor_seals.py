"""``tacho doctor``'s seal and blob checks, on real SQLite stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import tachograph
from tachograph.doctor import Finding, run_checks
from tachograph.lifecycle.blobs import BlobRule, BlobStore
from tachograph.store import SQLiteStore
from tachograph.testing import build_run

from .helpers import make_key, record


def _of(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def test_unsealed_runs_are_a_warning_and_sealed_ones_pass(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path)
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        record(store, "sealed-run", 12, key=key)
        store.append(build_run("plain-run", 3))
        seals = _of(run_checks(store), "seals")
    finally:
        store.close()
    assert [(f.level, f.message) for f in seals] == [("warning", "1 run(s) not sealed: plain-run")]
    assert "sealed by default" in seals[0].advice


def test_seals_without_a_checkpoint_count_only_until_a_key_is_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, key_file = make_key(tmp_path)
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        record(store, "run-a", 7, key=key)
        record(store, "run-b", 9, key=None)  # seals waiting for a checkpoint
        without = _of(run_checks(store), "seals")
        monkeypatch.setenv("TACHOGRAPH_SIGNING_KEY", str(key_file))
        with_key = _of(run_checks(store), "seals")
    finally:
        store.close()
    assert [(f.level, f.message) for f in without] == [("ok", "all 2 run(s) are sealed")]
    # Against the trusted key, run-b's seals still wait for a signed checkpoint.
    assert [(f.level, f.message) for f in with_key] == [("warning", "1 run(s) not sealed: run-b")]


def test_a_run_changed_after_its_seal_is_a_problem(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path)
    path = tmp_path / "runs.db"
    store = SQLiteStore(path)
    try:
        record(store, "run-a", 10, key=key)
        sealed_seq = store.seals_for_run("default", "run-a")[0].seq
    finally:
        store.close()
    con = sqlite3.connect(path)
    con.execute("DROP TRIGGER events_append_only_update")
    con.execute(
        "UPDATE events SET hash=? WHERE run_id='run-a' AND seq=?",
        ("sha256:" + "0" * 64, sealed_seq),
    )
    con.commit()
    con.close()
    store = SQLiteStore(path)
    try:
        seals = _of(run_checks(store), "seals")
    finally:
        store.close()
    assert [f.level for f in seals] == ["problem"]
    assert f"seq {sealed_seq}" in seals[0].message
    assert "changed after it was sealed" in seals[0].advice


def test_a_blob_that_no_longer_matches_is_a_problem(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        assert _of(run_checks(store), "blobs") == []  # no blob folder: nothing to check
        blobs = BlobStore.beside(store)
        rule = BlobRule(blobs, threshold=100, types=["acme.note"])
        with tachograph.record(store, actor="a", input="go", processors=[rule]) as run:
            tachograph.emit("acme.note", {"big": "y" * 500})
        tachograph.capture.recorder.writer_for(store).drain()
        assert [(f.level, f.message) for f in _of(run_checks(store), "blobs")] == [
            ("ok", "1 blob(s) match their references")
        ]
        ref = store.events(run.run_id)[1].payload["big"]
        blob_file = blobs.path_for(ref["$blob"])
        blob_file.chmod(0o600)
        blob_file.write_bytes(b"z" * 500)
        found = _of(run_checks(store), "blobs")
    finally:
        store.close()
    assert [f.level for f in found] == ["problem"]
    assert "seq 1" in found[0].message
    assert "$.big" in found[0].message
