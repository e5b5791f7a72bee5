"""Numbers in checkpoints, proofs and witness requests are ASCII decimals: a digit
``str.isdigit`` takes (``²``, ``٣``) is a failure that says so, never a traceback and never
a second spelling of a number that verifies."""

from __future__ import annotations

import http.client
import json
import sqlite3
from pathlib import Path

import pytest

from tachograph.errors import SealingError
from tachograph.record.checkpoint import Checkpoint, TlogProof, decimal
from tachograph.record.seal import parse_default_key
from tachograph.store import SQLiteStore

from .helpers import make_key, record, start_witness, tacho

ODD_DIGITS = ["\u00b3", "\u0663", "\uff13", "03", "-3", "+3", " 3", "3 ", "", "1" * 21]


@pytest.mark.parametrize("text", ODD_DIGITS)
def test_only_ascii_decimals_are_numbers(text: str) -> None:
    assert decimal(text) is None
    assert decimal("0") == 0
    assert decimal("30") == 30


@pytest.mark.parametrize("size", ODD_DIGITS[:3])
def test_a_checkpoint_size_in_other_digits_is_refused(size: str) -> None:
    root = "A" * 43 + "="
    with pytest.raises(SealingError, match="not a decimal"):
        Checkpoint.parse(f"log.example/t\n{size}\n{root}\n")


@pytest.mark.parametrize("index", ODD_DIGITS[:3])
def test_a_proof_index_in_other_digits_is_refused(index: str) -> None:
    root = "A" * 43 + "="
    text = f"c2sp.org/tlog-proof@v1\nindex {index}\n\nlog.example/t\n3\n{root}\n\n"
    with pytest.raises(SealingError, match="index"):
        TlogProof.parse(text.encode())


def test_a_key_repeat_in_other_digits_is_no_default_key() -> None:
    assert parse_default_key("r:tool:0123456789abcdef#2", "r") == ("tool", "0123456789abcdef", 2)
    assert parse_default_key("r:tool:0123456789abcdef#\u00b2", "r") is None


def test_a_checkpoint_edited_to_other_digits_fails_verify_without_a_traceback(
    tmp_path: Path,
) -> None:
    key, _ = make_key(tmp_path / "keys")
    db = tmp_path / "store" / "t.db"
    with SQLiteStore(db) as store:
        record(store, "run-a", 12, key=key)
    raw = sqlite3.connect(db, isolation_level=None)
    for (name,) in raw.execute(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'checkpoints'"
    ).fetchall():
        raw.execute(f"DROP TRIGGER {name}")
    (size,) = raw.execute("SELECT max(size) FROM checkpoints").fetchone()
    raw.execute(
        "UPDATE checkpoints SET note = replace(note, char(10) || ? || char(10), "
        "char(10) || ? || char(10)) WHERE size = ?",
        (str(size), "\u0663" if size == 3 else "\u00b3", size),
    )
    raw.close()
    for args in (("verify",), ("verify", "--key", str(key.verifier)), ("show", "run-a")):
        result = tacho(*args, store=db)
        assert result.exit_code == 1, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), args
        assert "Traceback" not in result.output
    data = json.loads(tacho("verify", "--json", "--key", str(key.verifier), store=db).output)
    assert data["ok"] is False


def test_the_witness_answers_400_to_other_digits(tmp_path: Path) -> None:
    key, _ = make_key(tmp_path / "keys")
    _wkey, wkey_file = make_key(tmp_path / "wkeys", "witness.example/w1", witness=True)
    proc, url = start_witness(tmp_path / "wstate", wkey_file, str(key.verifier))
    try:
        host, port = url.removeprefix("http://").split(":")
        for body, length in ((b"old \xc2\xb2\n\nx\n", None), (b"old 0\n\nx\n", "abc")):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.putrequest("POST", "/add-checkpoint")
            conn.putheader("Content-Length", length or str(len(body)))
            conn.endheaders(body)
            answer = conn.getresponse()
            assert answer.status == 400, answer.read()
            conn.close()
        assert proc.poll() is None  # still serving
    finally:
        proc.kill()
        proc.wait()
