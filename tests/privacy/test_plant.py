"""Plant known personal data and secrets through every way into a store, then search every
place they could surface for them: the database and its -wal and -shm files, `tacho export`,
`tacho show`, OpenTelemetry spans, logs and error messages. Nothing may be found."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import tachograph
import tachograph.otel as tgo
from fakes.llm_server import FakeLLMServer
from tachograph.cli.app import cli
from tachograph.errors import Divergence
from tachograph.integrations.openai import instrument
from tachograph.privacy import pii_policy

from .planted import (
    CARD,
    EMAIL,
    IBAN,
    IP,
    JWT,
    KEY,
    KEY_HEX,
    OPENAI,
    PASSWORD,
    PHONE,
    PRIVATE_KEY,
    STRIPE,
    hits,
)

MODEL = "fake-model-2026-01-01"


@tachograph.tool(effect="read")
def lookup_customer(email: str, card: str) -> dict[str, Any]:
    return {"email": email, "iban": IBAN, "phone": PHONE, "note": f"use Bearer {STRIPE}"}


@tachograph.tool(effect="write")
def charge(card: str, password: str) -> dict[str, Any]:
    raise RuntimeError(f"card {CARD} declined for {EMAIL} with key {STRIPE} from {IP}")


@tachograph.model(MODEL)
def ask(request: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "text": f"customer {EMAIL} at {IP}, token {JWT}"}


def _agent(srv: FakeLLMServer) -> str:
    customer = lookup_customer(EMAIL, CARD)
    try:
        charge(CARD, PASSWORD)
    except RuntimeError:
        pass
    ask(
        {
            "system": f"You help {EMAIL}. Never reveal {OPENAI}.",
            "messages": [{"role": "user", "content": f"my card is {CARD}"}],
            "key": PRIVATE_KEY,
        }
    )
    client = instrument(openai.OpenAI(base_url=srv.openai_base_url, api_key=OPENAI, max_retries=0))
    answer = client.chat.completions.create(
        model="gpt-5.6-2026-09-30",
        messages=[
            {"role": "system", "content": f"Escalate to {EMAIL}, phone {PHONE}."},
            {"role": "user", "content": f"I am {EMAIL}, card {CARD}, IBAN {IBAN}, key {STRIPE}"},
        ],
    )
    return f"{customer['email']} said: {answer.choices[0].message.content}"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tgo.instrument(provider, capture_content=True)  # content on: the most that can leave
    yield exporter
    tgo.uninstrument()
    provider.shutdown()


def _span_text(span: ReadableSpan) -> str:
    parts: list[Any] = [span.name, dict(span.attributes or {}), span.status.description]
    parts.extend((e.name, dict(e.attributes or {})) for e in span.events)
    return json.dumps(parts, default=str)


def _plaintext_jsonl(tmp_path: Path) -> Path:
    """A verified JSONL file with plaintext in it, as another system would export it."""
    source = tmp_path / "elsewhere.db"
    with tachograph.open_store(source, create=True) as store:
        with tachograph.record(
            store,
            actor="other",
            input={"email": EMAIL, "card": CARD},
            redact_secrets=False,
            observers=[],  # another system: not traced here
        ) as run:
            tachograph.decide("contact", f"write to {EMAIL} with {STRIPE}")
            run.output = {"password": PASSWORD, "ip": IP}
        out = tmp_path / "elsewhere.jsonl"
        with out.open("wb") as handle:
            tachograph.export_run(store, run.run_id, handle)
    assert hits(out.read_bytes()), "the file to import must hold plaintext"
    return out


def test_planted_values_reach_no_output(
    tmp_path: Path,
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("TACHOGRAPH_STORE", raising=False)
    db = tmp_path / "store" / "runs.db"
    policy = pii_policy(KEY)
    store = tachograph.open_store(db, create=True)

    # 1. decorators and the OpenAI SDK, in one recorded run
    with (
        FakeLLMServer() as srv,
        tachograph.record(
            store, actor="support", input={"email": EMAIL, "api_key": OPENAI}, processors=[policy]
        ) as run,
    ):
        run.output = _agent(srv)
    recorded = run.run_id

    # 2. a run that fails: the exception message goes into run.finished and the span status
    with (
        pytest.raises(RuntimeError),
        tachograph.record(store, actor="support", input=EMAIL, processors=[policy]),
    ):
        charge(CARD, PASSWORD)

    # 3. an import (the CLI), with the PII policy switched on by the environment
    plaintext = _plaintext_jsonl(tmp_path)
    monkeypatch.setenv("TACHOGRAPH_PII", "on")
    monkeypatch.setenv("TACHOGRAPH_PII_KEY", KEY_HEX)
    monkeypatch.setenv("TACHOGRAPH_PII_KEY_ID", "t1")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--store", str(db), "import", str(plaintext)])
    assert imported.exit_code == 0, imported.output
    assert "redacted" in imported.output

    # 4. an error message: a replay whose agent now writes to another address diverges
    def changed_agent(task: Any) -> None:
        lookup_customer("someone.else@example.org", CARD)

    with pytest.raises(Divergence) as diverged:
        tachograph.replay(store, recorded, changed_agent, raise_on_divergence=True)
    message = str(diverged.value)
    assert "pii1:t1:" in message
    assert "someone.else" not in message  # the live side is redacted before it is compared

    # the files while the store is open: the WAL holds the newest pages
    store_files = {p.name: p.read_bytes() for p in db.parent.iterdir()}
    assert {"runs.db", "runs.db-wal", "runs.db-shm"} <= set(store_files)
    exported = runner.invoke(cli, ["--store", str(db), "export", "--all"])
    assert exported.exit_code == 0
    shown = []
    for info in store.runs():
        for extra in ([], ["--full"], ["--json", "--full"]):
            result = runner.invoke(cli, ["--store", str(db), "show", info.run_id, *extra])
            assert result.exit_code == 0, result.output
            shown.append(result.output)
    store.close()
    store_files["runs.db (closed)"] = db.read_bytes()
    span_texts = [_span_text(s) for s in spans.get_finished_spans()]
    assert len(span_texts) >= 6

    places: dict[str, str | bytes] = {
        **store_files,
        "tacho export": exported.output,
        # (the JSON names the store's path, which holds this test's name: not a leak)
        "tacho show": "\n".join(shown).replace(str(db.parent.parent), "<tmp>"),
        "spans": "\n".join(span_texts),
        "logs": caplog.text,
        "error message": message,
        "tacho import": imported.output,
    }
    leaks = {where: found for where, text in places.items() if (found := hits(text))}
    assert leaks == {}

    # ... and the redaction did happen: tokens and markers are what was stored instead
    db_text = store_files["runs.db-wal"] + store_files["runs.db (closed)"]
    assert KEY.token(EMAIL.lower()).encode() in db_text
    assert KEY.token(CARD.replace(" ", "")).encode() in db_text
    assert b"[redacted:secret:stripe]" in db_text
    assert b"[redacted:secret:field]" in db_text
    assert b"[redacted:secret:private_key]" in db_text
    assert "[redacted:secret:stripe]" in places["spans"]  # content on: spans carry markers
    with tachograph.open_store(db) as reopened:
        assert len(reopened.runs()) == 3
        assert all(reopened.verify(info.run_id).ok for info in reopened.runs())
