"""``tacho erase --subject``: an empty id is a usage error (exit 2), as an empty ``--reason``
is; and without a key, a store that links its subjects under keyed tokens is not reported as
holding nothing on the subject (exit 0, "nothing erased"): the key is asked for (exit 2) and
nothing is erased."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

import tachograph as tg
from tachograph.capture.recorder import writer_for
from tachograph.cli.app import EXIT_OK, EXIT_USAGE, cli
from tachograph.errors import PrivacyError
from tachograph.lifecycle.erasure import SubjectRule, erase
from tachograph.privacy import KeyRing, pii_policy

KEY = "ab" * 16
EMAIL = "Zoe.Canary@Example.com"


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TACHOGRAPH_PII", "TACHOGRAPH_PII_KEY", "TACHOGRAPH_PII_KEY_ID",
                 "TACHOGRAPH_PII_KEY_FILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


def _tokenized(tmp_path: Path) -> Path:
    """A store whose subject links are keyed tokens (the PII policy ran before the rule)."""
    db = tmp_path / "runs.db"
    ring = KeyRing.of(bytes.fromhex(KEY), key_id="dpo1")
    with tg.open_store(db, create=True) as store:
        rule = SubjectRule(store, paths=["$.input.email"])
        with tg.record(
            store, actor="a", input={"email": EMAIL}, processors=[pii_policy(ring)],
            listeners=[rule],
        ) as run:  # fmt: skip
            tg.emit("acme.note", {"text": "hello"})
        writer_for(store).drain()
        assert run.run_id
    links = sqlite3.connect(db).execute("SELECT subject FROM subjects").fetchall()
    assert links
    assert all(s.startswith("pii1:dpo1:") for (s,) in links)
    return db


def _erase(db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--store", str(db), "erase", *args])
    return result.exit_code, result.output


def test_without_the_key_a_tokenized_store_asks_for_it(
    tmp_path: Path, no_key: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _tokenized(tmp_path)
    code, out = _erase(db, "--subject", EMAIL, "--reason", "GDPR art. 17")
    assert code == EXIT_USAGE, out
    assert "no PII key is configured" in out
    assert "'dpo1'" in out
    assert "nothing erased" not in out.replace("nothing was erased", "")
    with tg.open_store(db) as store:
        assert not list(store.read_audit())  # nothing erased, nothing recorded
        with pytest.raises(PrivacyError, match="dpo1"):
            erase(store, subject=EMAIL, reason="x")
    # with the key the runs were recorded with, the subject is found and erased
    monkeypatch.setenv("TACHOGRAPH_PII_KEY", KEY)
    monkeypatch.setenv("TACHOGRAPH_PII_KEY_ID", "dpo1")
    code, out = _erase(db, "--subject", EMAIL, "--reason", "GDPR art. 17", "--json")
    assert code == EXIT_OK, out
    assert json.loads(out)["erased"] >= 1


def test_a_subject_named_by_its_token_needs_no_key(tmp_path: Path, no_key: None) -> None:
    db = _tokenized(tmp_path)
    token = KeyRing.of(bytes.fromhex(KEY), key_id="dpo1").token(EMAIL.lower())
    code, out = _erase(db, "--subject", token, "--reason", "GDPR", "--json")
    assert code == EXIT_OK, out
    assert json.loads(out)["erased"] >= 1


def test_a_store_of_plain_links_still_says_nothing_is_linked(tmp_path: Path, no_key: None) -> None:
    db = tmp_path / "plain.db"
    with tg.open_store(db, create=True) as store:
        rule = SubjectRule(store, paths=["$.input.customer"])
        with tg.record(store, actor="a", input={"customer": "cust-1"}, listeners=[rule]):
            pass
        writer_for(store).drain()
    code, out = _erase(db, "--subject", "cust-2", "--reason", "x")
    assert code == EXIT_OK, out
    assert "nothing erased" in out


@pytest.mark.parametrize("subject", ["", "\udcff"])
def test_an_empty_or_broken_subject_is_a_usage_error(
    tmp_path: Path, no_key: None, subject: str
) -> None:
    db = _tokenized(tmp_path)
    code, out = _erase(db, "--subject", subject, "--reason", "x")
    assert code == EXIT_USAGE, out
    assert "--subject" in out


@pytest.mark.parametrize("engine", ["sqlite", "memory"])
def test_each_engine_names_the_key_ids_of_its_token_links(
    tmp_path: Path, engine: str, no_key: None
) -> None:
    url = str(tmp_path / "e.db") if engine == "sqlite" else "memory://"
    with tg.open_store(url, create=True) as store:
        run = tg.record_run(lambda task: "ok", "go", store=store, tenant="acme")
        assert store.subject_key_ids("acme") == frozenset()
        store.link_subjects("acme", run.run_id, [(0, "cust-1"), (0, "pii1:k1:0123456789abcdef")])
        store.link_subjects("acme", run.run_id, [(0, "pii1:k2.b:0123456789abcdef")])
        assert store.subject_key_ids("acme") == {"k1", "k2.b"}
        assert store.subject_key_ids("default") == frozenset()
        assert erase(store, subject="cust-1", reason="x", tenant="default").runs == ()
        with pytest.raises(PrivacyError, match=r"'k1', 'k2\.b'"):
            erase(store, subject="cust-1", reason="x", tenant="acme")
