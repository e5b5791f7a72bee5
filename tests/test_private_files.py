"""Files that hold a record are their owner's only, as the store is: exports, evidence
folders, corpus fixtures and the blob folders (a review found evidence and corpus files
written 0644 and blob folders 0755 under the usual umask)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import tachograph
from tachograph.lifecycle.blobs import BlobRule, BlobStore
from tachograph.record.files import make_private_dirs, write_whole
from tachograph.regression.corpus import save_run


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_whole_is_private_and_leaves_nothing_on_an_error(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    with write_whole(target) as f:
        f.write(b"one\n")
    assert target.read_bytes() == b"one\n"
    assert _mode(target) == 0o600
    with pytest.raises(RuntimeError), write_whole(target) as f:
        f.write(b"half")
        raise RuntimeError("stopped")
    assert target.read_bytes() == b"one\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]


def test_a_stop_right_after_the_file_is_created_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C or SIGTERM (raised as KeyboardInterrupt) landing just after the temporary file
    # exists and before any handle to it is returned: its clean-up must still find it
    real_open = os.open

    def open_then_stop(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        os.close(fd)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", open_then_stop)
    with pytest.raises(KeyboardInterrupt), write_whole(tmp_path / "out.jsonl") as f:
        f.write(b"never")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_make_private_dirs_gives_every_new_folder_0700(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    make_private_dirs(deep)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", deep):
        assert _mode(folder) == 0o700, folder


def test_corpus_files_and_blob_folders_are_private(tmp_path: Path) -> None:
    store = tachograph.open_store(tmp_path / "runs.db")
    blobs = BlobStore.beside(store)
    rule = BlobRule(blobs, paths=["$.document"], types=["acme.*"], ttl=3600)
    with tachograph.record(store, actor="a", input="go", processors=[rule]) as run:
        tachograph.emit("acme.upload", {"document": {"pages": ["p1"]}, "name": "contract"})
    tachograph.capture.recorder.writer_for(store).drain()
    folders = [p for p in blobs.root.rglob("*") if p.is_dir()] + [blobs.root]
    assert folders
    assert all(_mode(p) == 0o700 for p in folders), [(p, oct(_mode(p))) for p in folders]
    fixture = save_run(store, run.run_id, to=tmp_path / "corpus", verdict="good")
    written = [fixture, *fixture.parent.glob("*.json")]
    assert all(_mode(p) == 0o600 for p in written), [(p, oct(_mode(p))) for p in written]
    store.close()


def test_evidence_files_are_private(tmp_path: Path) -> None:
    from tachograph.capture.recorder import Recorder
    from tachograph.record.checkpoint import generate_key
    from tachograph.sealing import SealingObserver, SealPolicy, write_evidence

    key = generate_key("owner.example/tachograph")
    store = tachograph.open_store(tmp_path / "runs.db")
    observer = SealingObserver(policy=SealPolicy(every_events=2), key=key)
    recorder = Recorder(store, run_id="sealed", actor="agent", observers=[observer])
    recorder.append("run.started", {"input": "x", "env": {}})
    recorder.append("run.finished", {"status": "ok"})
    recorder.flush()
    observer.drain()
    folder = write_evidence(store, "sealed", tmp_path / "bundle", verifier_keys=[key.verifier])
    assert _mode(folder) == 0o700
    files = list(folder.iterdir())
    assert len(files) == 4
    assert all(_mode(p) == 0o600 for p in files), [(p, oct(_mode(p))) for p in files]
    store.close()
