"""Lines the commands print with ``click.echo`` rather than through the table writer carry
untrusted text too: an evidence bundle from elsewhere (its keys and signer), a source
store's verification report in ``tacho migrate``, a corpus name. Each is escaped; and a
corpus name that would leave the corpus folder is refused."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tachograph.cli.app import EXIT_FAILED, EXIT_OK, EXIT_USAGE

from .conftest import Tacho

HOSTILE = "evil\x1b]0;PWNED\x07\x1b[2J\u202e\x9b\U000e0041"


def _raw_control(text: str) -> list[str]:
    return [c for c in text if c in "\x1b\x07\x9b\u202e\U000e0041"]


def test_an_evidence_bundles_own_text_is_escaped(
    tacho: Tacho,
    run_id: str,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = tmp_path_factory.mktemp("keys") / "log.key"
    assert tacho("keys", "init", "-o", str(key)).exit_code == EXIT_OK
    monkeypatch.setenv("TACHOGRAPH_SIGNING_KEY", str(key))
    assert tacho("seal").exit_code == EXIT_OK
    bundle = tmp_path_factory.mktemp("bundle") / "ev"
    made = tacho("evidence", run_id, "-o", str(bundle))
    assert made.exit_code == EXIT_OK, made.output
    lines = (bundle / "run.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first[HOSTILE] = 1  # an unknown key, which the report names
    lines[0] = json.dumps(first)
    (bundle / "run.jsonl").write_text("\n".join(lines) + "\n")
    result = tacho("verify", str(bundle), store=False)
    assert result.exit_code == EXIT_FAILED, result.output
    assert "evil" in result.output
    assert _raw_control(result.output) == [], result.output
    assert "\\x1b]0;PWNED" in result.output


def test_migrate_escapes_the_source_stores_report(
    tacho: Tacho, run_id: str, tmp_path: Path
) -> None:
    db = sqlite3.connect(tacho.store)
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
    for name in names:
        db.execute(f'DROP TRIGGER "{name}"')
    db.execute("UPDATE runs SET head_hash = ?", ("h" + HOSTILE,))
    db.commit()
    db.close()
    result = tacho("migrate", str(tacho.store), str(tmp_path / "copy.db"), store=False)
    assert result.exit_code == EXIT_FAILED, result.output
    assert "FAILED" in result.output
    assert _raw_control(result.output) == [], result.output


@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", "", "q\x1b[2Jx", " padded"])
def test_a_corpus_name_that_leaves_its_folder_or_hides_text_is_refused(
    tacho: Tacho, run_id: str, tmp_path: Path, name: str
) -> None:
    corpus = tmp_path / "corpus"
    result = tacho("save", run_id, "--to", str(corpus), "--verdict", "good", "--name", name)
    assert result.exit_code == EXIT_USAGE, result.output
    assert "is not a plain file name" in result.output
    assert _raw_control(result.output) == []
    assert not (tmp_path / "escaped.jsonl").exists()
    assert not corpus.exists() or not list(corpus.iterdir())


def test_a_plain_corpus_name_is_kept(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    result = tacho(
        "save", run_id, "--to", str(tmp_path / "c"), "--verdict", "good", "--name", "refund ok"
    )
    assert result.exit_code == EXIT_OK, result.output
    assert (tmp_path / "c" / "refund ok.jsonl").exists()
