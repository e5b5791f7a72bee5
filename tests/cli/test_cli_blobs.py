"""Blob references (SPEC section 6) through ``tacho``: values shaped like a reference that are
not one, and blobs that cannot be read, in ``verify``. Real stores, real blob folders, real
``tacho`` processes."""

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
