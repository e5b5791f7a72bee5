"""What a review of the command line as a new user found: output paths under a file or on a
device, keys and witness options, addresses given as witnesses, limits beyond SQLite's
integers. Each refusal is a usage error with a message, never a traceback, and a device is
never replaced by a file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import tachograph as tg
from tachograph.cli.app import EXIT_OK, EXIT_USAGE
from tachograph.record.files import write_whole

from .conftest import Tacho


def test_write_whole_never_replaces_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"), write_whole(fifo) as handle:
        handle.write(b"x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no partial file left


@pytest.fixture
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for keys, apart from the store's (a signing key must not sit beside it)."""
    return tmp_path_factory.mktemp("keys")


def test_output_paths_under_a_file_are_usage_errors(
    tacho: Tacho, run_id: str, tmp_path: Path, keys: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    key = tacho("keys", "init", "-o", str(blocker / "k"), store=False)
    assert key.exit_code == EXIT_USAGE, key.output
    assert "not a folder" in key.output
    real_key = keys / "log.key"
    assert tacho("keys", "init", "-o", str(real_key)).exit_code == EXIT_OK
    monkeypatch.setenv("TACHOGRAPH_SIGNING_KEY", str(real_key))
    assert tacho("seal").exit_code == EXIT_OK
    evidence = tacho("evidence", run_id, "-o", str(blocker / "sub"))
    assert evidence.exit_code == EXIT_USAGE, evidence.output
    assert "cannot write the evidence" in evidence.output
    saved = tacho("save", run_id, "--to", str(blocker / "sub"), "--verdict", "good")
    assert saved.exit_code == EXIT_USAGE, saved.output
    assert "corpus folder" in saved.output
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    corpus = tmp_path / "corpus"
    assert tacho("save", run_id, "--to", str(corpus), "--verdict", "good").exit_code == EXIT_OK
    for junit in (blocker / "x.xml", fifo):
        result = tacho(
            "test", str(corpus), "--agent", "tachograph.demo.agent:billing_agent",
            "--workers", "1", "--junit", str(junit),
        )  # fmt: skip
        assert result.exit_code == EXIT_USAGE, result.output
        assert "--junit" in result.output
        assert "reproduced" not in result.output  # refused before any replay
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_key_and_witness_options_are_checked_as_usage(
    tacho: Tacho, tmp_path: Path, keys: Path
) -> None:
    bad_name = tacho("keys", "init", "-o", str(keys / "x.key"), "--name", "a b")
    assert bad_name.exit_code == EXIT_USAGE
    assert "--name 'a b'" in bad_name.output
    key = keys / "w.key"
    assert tacho("keys", "init", "--witness", "-o", str(key)).exit_code == EXIT_OK
    common = ("witness", "--dir", str(tmp_path / "w"), "--key-file", str(key))
    bogus = tacho(*common, "--log-key", "bogus", store=False)
    assert bogus.exit_code == EXIT_USAGE
    assert "--log-key bogus" in bogus.output
    port = tacho(*common, "--log-key", "bogus", "--port", "99999", store=False)
    assert port.exit_code == EXIT_USAGE
    assert "0<=x<=65535" in port.output


@pytest.mark.parametrize("target", ["127.0.0.1:8080", "localhost:1", "htp:/bad"])
def test_an_address_is_not_taken_for_a_witness_folder(
    tacho: Tacho,
    run_id: str,
    tmp_path: Path,
    keys: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: str,
) -> None:
    key = keys / "log.key"
    assert tacho("keys", "init", "-o", str(key)).exit_code == EXIT_OK
    monkeypatch.chdir(tmp_path)
    result = tacho("seal", "--key-file", str(key), "--witness", target)
    assert result.exit_code == 1, result.output
    assert "http://" in result.output
    assert not (tmp_path / target.split("/")[0]).exists()  # no folder made for it
    with tg.open_store(tacho.store) as store:
        assert store.latest_checkpoint("default") is None  # nothing signed


def test_a_limit_beyond_sqlite_integers_means_all(tacho: Tacho, run_id: str) -> None:
    for command in ("runs", "audit"):
        result = tacho(command, "--limit", str(2**63), "--json")
        assert result.exit_code == EXIT_OK, result.output


def test_a_pipe_given_as_a_file_is_named_as_one(tacho: Tacho, run_id: str, tmp_path: Path) -> None:
    fifo = tmp_path / "lines.fifo"
    os.mkfifo(fifo)
    for args in (("import", str(fifo)), ("verify", str(fifo)), ("otel", "import", str(fifo))):
        result = tacho(*args)
        assert result.exit_code == EXIT_USAGE, (args, result.output)
        assert "a pipe or device, not a regular file" in result.output, result.output
        assert "no such file" not in result.output
    missing = tacho("import", str(tmp_path / "missing.jsonl"))
    assert missing.exit_code == EXIT_USAGE
    assert "no such file" in missing.output


def test_credentials_in_a_store_url_are_not_printed(tacho: Tacho) -> None:
    url = "postgresql://app:CANARYpgpw@127.0.0.1:1/db"
    for args in (("--store", url, "runs"), ("--store", url, "doctor"), ("migrate", url, "x.db")):
        result = tacho(*args, store=False)
        assert result.exit_code != 0
        assert "CANARYpgpw" not in result.output, result.output
        assert "app:***@127.0.0.1" in result.output


def test_redact_url_hides_passwords_and_credential_parameters() -> None:
    from tachograph.views.text import redact_url

    assert (
        redact_url("http://otel:pw@h:4318/v1/traces?api_key=k1&x=1&access_token=t")
        == "http://otel:***@h:4318/v1/traces?api_key=***&x=1&access_token=***"
    )
    for plain in ("sqlite:///a.db", "./runs.db", "postgresql://app@h/db?tenant=acme"):
        assert redact_url(plain) == plain
    # an Azure Functions key (or an OAuth code) is code=; a country_code is no credential
    assert (
        redact_url("https://fn.example/api/otlp?code=V6x7Qm3Rt9Zp6&country_code=FR")
        == "https://fn.example/api/otlp?code=***&country_code=FR"
    )


def test_a_password_in_a_store_urls_query_is_not_printed(tacho: Tacho) -> None:
    """libpq takes ``?password=`` as well as ``user:pw@``; ``version`` printed the store URL
    as given, and a PostgreSQL store's ``url`` (in --json, in errors) kept the query's."""
    from tachograph.store.postgres import redact

    url = "postgresql://app:CANARYpw1@127.0.0.1:1/db?password=CANARYpw2&sslmode=bogus"
    for args in (("--store", url, "version"), ("--store", url, "version", "--json")):
        result = tacho(*args, store=False)
        assert result.exit_code == 0, result.output
        assert "CANARYpw" not in result.output, result.output
    failed = tacho("--store", url, "runs", store=False)
    assert failed.exit_code != 0
    assert "CANARYpw" not in failed.output, failed.output
    assert redact("postgresql://h/db?password=s&sslpassword=t&tenant=acme") == (
        "postgresql://h/db?password=***&sslpassword=***&tenant=acme"
    )
    assert redact("postgresql://app@h/db?tenant=acme") == "postgresql://app@h/db?tenant=acme"
