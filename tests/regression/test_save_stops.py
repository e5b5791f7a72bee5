"""``tacho save`` stopped part way (SIGTERM in a real process) or refused a bad folder: a
run's file never stays without its sidecar, which the corpus would take for a good run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.demo.agent import billing_agent
from tachograph.errors import CorpusError
from tachograph.regression.runner import save_run

TASK = "Order A-4471 arrived damaged. Please refund it."

STOPPER = """
import os, signal, sys
import tachograph.regression.corpus as corpus

original = corpus.write_json
when = sys.argv[1]

def stopping(path, data):
    if when == "before":
        os.kill(os.getpid(), signal.SIGTERM)
    original(path, data)
    if when == "after":  # the sidecar has its name; the run's file not yet
        os.kill(os.getpid(), signal.SIGTERM)

corpus.write_json = stopping
from tachograph.cli import main
sys.argv = ["tacho", "--store", sys.argv[2], "save", sys.argv[3], "--to", sys.argv[4],
            "--verdict", "bad", "--wrong-at", "9"]
main()
"""


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "runs.db"
    with tg.open_store(db, create=True) as store:
        run_id = tg.record_run(billing_agent, TASK, store=store).run_id
    return db, run_id


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_save_stopped_part_way_leaves_no_run_without_its_verdict(
    tmp_path: Path, stored: tuple[Path, str], when: str
) -> None:
    db, run_id = stored
    corpus = tmp_path / "corpus"
    done = subprocess.run(
        [sys.executable, "-c", STOPPER, when, str(db), run_id, str(corpus)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 143, done.stderr
    left = sorted(p.name for p in corpus.iterdir()) if corpus.exists() else []
    assert left == [], left


def test_a_corpus_folder_that_cannot_be_made_is_a_corpus_error(
    tmp_path: Path, stored: tuple[Path, str]
) -> None:
    db, run_id = stored
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for to in (blocker / "sub", blocker):
        with pytest.raises(CorpusError, match="folder"):
            save_run(db, run_id, to=to, verdict="good")
