"""Blob references (SPEC section 6) through ``tacho``: values shaped like a reference that are
not one, and blobs whose bytes no longer match their reference, in ``verify``, ``show`` and
``export``. Real stores, real blob folders, real ``tacho`` processes."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tachograph
from tachograph.lifecycle.blobs import BlobRule, BlobStore, is_blob_ref

from .conftest import Tacho

Run = Callable[..., subprocess.CompletedProcess[str]]

MISSING = "sha256:" + "b" * 64
NOT_REFERENCES = {
    "bad digest": {"$blob": "sha256:zz", "size": 3, "media_type": "t"},
    "negative size": {"$blob": "sha256:" + "a" * 64, "size": -5, "media_type": "t"},
    "boolean size": {"$blob": "sha256:" + "c" * 64, "size": True, "media_type": "t"},
}


def _drain(path: Path) -> None:
    with tachograph.open_store(path) as store:
        tachograph.capture.recorder.writer_for(store).drain()


@pytest.fixture
def shaped(tmp_path: Path) -> tuple[Path, str, str]:
    """``b.db``: a run holding three values shaped like references that are not one and a
    well-formed reference whose blob is not here, then a run with no blob at all."""
    path = tmp_path / "b.db"
    with tachograph.record(str(path), actor="x", input={}) as odd:
        for name, value in NOT_REFERENCES.items():
            tachograph.emit("acme.doc", {"doc": value, "name": name})
        tachograph.emit("acme.doc", {"doc": {"$blob": MISSING, "size": 5, "media_type": "t"}})
    with tachograph.record(str(path), actor="x", input={}) as plain:
        tachograph.emit("acme.note", {"text": "nothing kept outside"})
    _drain(path)
    return path, odd.run_id, plain.run_id


def _malformed(blobs: dict[str, Any]) -> list[tuple[int, str, str]]:
    return [(m["seq"], m["path"], m["message"]) for m in blobs["malformed"]]


def _assert_reported(runs: list[dict[str, Any]], odd: str, plain: str) -> None:
    by_id = {r["run_id"]: r for r in runs}
    assert set(by_id) == {odd, plain}
    assert all("blobs" in r and r["status"] == "verified" for r in runs)
    blobs = by_id[odd]["blobs"]
    assert blobs["ok"] is True
    assert blobs["failures"] == []
    assert blobs["verified"] == []
    assert blobs["expired"] == [{"seq": 4, "path": "$.doc", "digest": MISSING}]
    found = _malformed(blobs)
    assert [(s, p) for s, p, _ in found] == [(1, "$.doc"), (2, "$.doc"), (3, "$.doc")]
    assert "'sha256:zz'" in found[0][2]
    assert "size is -5" in found[1][2]
    assert "size is True" in found[2][2]
    assert by_id[plain]["blobs"] == {
        "ok": True,
        "verified": [],
        "expired": [],
        "failures": [],
        "malformed": [],
    }


def test_a_value_shaped_like_a_reference_is_reported_per_run_in_a_file(
    shaped: tuple[Path, str, str], run_tacho: Run, tmp_path: Path
) -> None:
    """It used to abort ``verify FILE`` (``Error: not a blob digest``, no report of any run,
    the good run beside it unreported) and hide the missing blob after it."""
    path, odd, plain = shaped
    exported = run_tacho("--store", str(path), "export", "--all", "-o", "b.jsonl")
    assert exported.returncode == 0, exported.stderr
    result = run_tacho("verify", "b.jsonl", "--json")
    assert result.returncode == 0, (result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert (data["ok"], data["verified"], data["failed"]) == (True, 2, 0)
    assert data["blobs"] == {"verified": 0, "expired": 1, "failed": 0, "malformed": 3}
    _assert_reported(data["runs"], odd, plain)

    text = run_tacho("verify", "b.jsonl")
    assert text.returncode == 0, text.stderr
    assert f"{odd}: verified, 6 events" in text.stdout
    assert f"{plain}: verified, 3 events" in text.stdout
    assert f"blobs of {odd}: 0 verified, 1 expired, 3 malformed" in text.stdout
    assert "seq 1 $.doc: not a blob reference: $blob is 'sha256:zz'" in text.stdout
    assert "2 of 2 run(s) verified" in text.stdout


def test_a_value_shaped_like_a_reference_keeps_the_blobs_of_a_store_run(
    shaped: tuple[Path, str, str], runner: CliRunner
) -> None:
    """``verify --json`` of the store used to leave that run without its ``blobs`` object."""
    path, odd, plain = shaped
    tacho = Tacho(path, runner)
    data = tacho.json("verify")
    assert data["ok"] is True
    assert data["blobs"] == {"verified": 0, "expired": 1, "failed": 0, "malformed": 3}
    _assert_reported(data["runs"], odd, plain)
    (one,) = tacho.json("verify", odd)["runs"]
    assert _malformed(one["blobs"]) == _malformed(
        next(r for r in data["runs"] if r["run_id"] == odd)["blobs"]
    )


def test_a_blob_rule_moves_out_a_value_shaped_like_a_reference(tmp_path: Path) -> None:
    """What the rule leaves in the log is always a well-formed reference: a value that only
    looks like one (a negative or boolean size, a bad digest) is moved out like any value,
    instead of passing through as if it were a reference already."""
    path = tmp_path / "r.db"
    blobs = BlobStore.beside(str(path))
    rule = BlobRule(blobs, paths=["doc"])
    with tachograph.record(str(path), actor="x", input={}, processors=[rule]) as run:
        for value in NOT_REFERENCES.values():
            tachograph.emit("acme.doc", {"doc": value})
    _drain(path)
    with tachograph.open_store(path) as store:
        docs = [e.payload["doc"] for e in store.events(run.run_id)[1:4]]
    assert all(is_blob_ref(doc) for doc in docs)
    for doc, value in zip(docs, NOT_REFERENCES.values(), strict=True):
        assert json.loads(blobs.get(doc["$blob"]) or b"") == value
    result = Tacho(path, CliRunner()).json("verify", run.run_id)
    (checked,) = result["runs"]
    assert (len(checked["blobs"]["verified"]), checked["blobs"]["malformed"]) == (3, [])


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, str, Path]:
    """``bl.db``: a run whose first blob (seq 1) was overwritten with other bytes of the
    same length, and whose second (seq 2) is intact."""
    path = tmp_path / "bl.db"
    blobs = BlobStore(f"{path}.blobs")
    rule = BlobRule(blobs, paths=["doc"])
    with tachograph.record(str(path), actor="x", input={}, processors=[rule]) as run:
        tachograph.emit("acme.doc", {"doc": "hello world"})
        tachograph.emit("acme.doc", {"doc": {"a": 1}})
    _drain(path)
    with tachograph.open_store(path) as store:
        ref = store.events(run.run_id)[1].payload["doc"]
    target = blobs.path_for(ref["$blob"])
    target.write_bytes(b"hello worlD")
    return path, run.run_id, target


def test_export_names_a_run_whose_blob_fails_and_exits_1(
    damaged: tuple[Path, str, Path], run_tacho: Run, tmp_path: Path
) -> None:
    """The damaged blob is copied as stored (the evidence, as a tampered run's bytes are),
    but the run is named on stderr and the export exits 1; the copy fails its verify too."""
    path, run_id, target = damaged
    result = run_tacho("--store", str(path), "export", "--all", "-o", "o.jsonl", "--blobs")
    assert result.returncode == 1, result.stderr
    assert f"TAMPERED: {run_id}: FAILED at seq 1, check 5 (payload digest): $.doc:" in (
        result.stderr
    )
    assert "exported 1 run(s), 4 events to o.jsonl and 2 blob(s)" in result.stderr
    copied = tmp_path / "o.jsonl.blobs" / target.relative_to(f"{path}.blobs")
    assert copied.read_bytes() == b"hello worlD"
    again = run_tacho("verify", "o.jsonl", "--json")
    assert again.returncode == 1
    (run,) = json.loads(again.stdout)["runs"]
    assert (run["status"], [f["seq"] for f in run["blobs"]["failures"]]) == ("failed", [1])

    # without --blobs too: the run fails verification wherever its blobs are not copied
    bare = run_tacho("--store", str(path), "export", run_id, "-o", "bare.jsonl")
    assert bare.returncode == 1
    assert f"TAMPERED: {run_id}: FAILED at seq 1" in bare.stderr
    assert not (tmp_path / "bare.jsonl.blobs").exists()


def test_show_marks_an_event_whose_blob_fails(
    damaged: tuple[Path, str, Path], run_tacho: Run
) -> None:
    path, run_id, _target = damaged
    text = run_tacho("--store", str(path), "show", run_id)
    assert text.returncode == 1, text.stderr
    assert f"TAMPERED: {run_id}: FAILED at seq 1, check 5 (payload digest)" in text.stdout
    marked = [line for line in text.stdout.splitlines() if "TAMPERED  " in line]
    assert len(marked) == 1
    assert marked[0].startswith("1 ")

    as_json = run_tacho("--store", str(path), "show", run_id, "--json")
    assert as_json.returncode == 1
    data = json.loads(as_json.stdout)
    assert [e["tampered"] for e in data["events"]] == [False, True, False, False]
    verification = data["verification"]
    assert verification["status"] == "failed"
    assert [f["path"] for f in verification["blobs"]["failures"]] == ["$.doc"]
    assert len(verification["blobs"]["verified"]) == 1


def test_verify_does_not_call_a_run_whose_blob_fails_verified(
    damaged: tuple[Path, str, Path], run_tacho: Run
) -> None:
    path, run_id, _target = damaged
    for args in (("verify",), ("verify", run_id)):
        result = run_tacho("--store", str(path), *args)
        assert result.returncode == 1, result.stdout
        head = result.stdout.splitlines()[0]
        assert head.startswith(f"{run_id}: FAILED at seq 1, check 5 (payload digest): $.doc:")
        assert "chain intact, 4 events" in head
        assert "verified," not in head
        assert f"blobs of {run_id}: 1 verified, 0 expired, 1 FAILED" in result.stdout
    whole = run_tacho("--store", str(path), "verify")
    assert "0 of 1 run(s) verified, 1 FAILED" in whole.stdout


def test_a_blob_that_cannot_be_read_fails_its_run(
    damaged: tuple[Path, str, Path], runner: CliRunner
) -> None:
    """A blob path that is there but cannot be read (here a folder) is neither verified nor
    expired: it fails the run. It used to drop the run's ``blobs`` from a store's verify and
    leave ``ok`` true."""
    path, run_id, target = damaged
    target.unlink()
    target.mkdir()
    tacho = Tacho(path, runner)
    for args in ((), (run_id,)):
        data = tacho.json("verify", *args, code=1)
        (run,) = data["runs"]
        assert run["status"] == "failed"
        (failure,) = run["blobs"]["failures"]
        assert failure["seq"] == 1
        assert "cannot be read" in failure["message"]
    shutil.rmtree(target)
    data = tacho.json("verify")
    assert [e["seq"] for e in data["runs"][0]["blobs"]["expired"]] == [1]
